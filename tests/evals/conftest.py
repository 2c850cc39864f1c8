"""The frameworks' telemetry is switched off before they are imported: these tests never reach
a network (RAGAS's usage analytics, DeepEval's telemetry and its Confident AI login)."""

import os

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
