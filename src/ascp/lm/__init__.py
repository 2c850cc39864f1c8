"""The language-model layer: prompt encoding, sampling generation, teacher-forced scoring.

Import `ascp.lm.resolve.load_language_model` to get a model; nothing heavy loads at import time.
"""
