"""Fit the attention map that ships for the tiny random test model (`ascp.lm.tiny`, seed 0).

The tests load it as the shipped map of that model (tests/test_attribution_attention.py). Its data
are synthetic contexts of test words written here, so the file says nothing about real text.

    .venv/bin/python tools/fit_test_map.py            # fit again
    .venv/bin/python tools/fit_test_map.py --rename   # only rename the shipped map's model (`named`)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "ascp" / "resources" / "attention_maps" / "tiny-random-0.json"
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "author", "born", "in", "1850", "river",
         "city", "wrote", "novel"]


def named(fitted):
    """The map under the tiny model's own name (`tiny-random-0`), not the temporary folder it was saved in:
    a shipped file names no folder of the machine that fitted it (maps match by fingerprint or digest)."""
    from dataclasses import replace

    from ascp.lm.tiny import tiny_language_model

    return replace(fitted, model_name=tiny_language_model(seed=0).name)


def main() -> int:
    from ascp.attribution.attention_map import load_map
    from ascp.lm.tiny import save_tiny_model

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        model = save_tiny_model(Path(tmp) / "model", seed=0)
        data = Path(tmp) / "cases.jsonl"
        with data.open("w") as handle:
            for i in range(60):
                pool = [{"id": f"p{i}-{j}", "text": " ".join(rng.choice(WORDS, size=10))} for j in range(5)]
                handle.write(json.dumps({"id": f"q{i}", "question": "who wrote it?", "answers": ["1850"],
                                         "pool": pool}) + "\n")
        fitted_path = Path(tmp) / "map.json"
        subprocess.run([sys.executable, "-m", "ascp.cli", "fit-probe", "--data", str(data), "--out", str(fitted_path),
                        "--model", str(model), "--backend", "hf", "--train-positions", "0-44", "--dev-positions",
                        "45-59", "--widths", "3,5", "--max-new-tokens", "8"], check=True)
        fitted = load_map(fitted_path)
    named(fitted.with_band(fitted.band, {"data": "synthetic contexts of test words (tools/fit_test_map.py; tests "
                                               "only)"})).save(OUT)
    print(f"wrote {OUT}")
    return 0


def rename() -> int:
    from ascp.attribution.attention_map import load_map

    named(load_map(OUT)).save(OUT)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(rename() if sys.argv[1:] == ["--rename"] else main())
