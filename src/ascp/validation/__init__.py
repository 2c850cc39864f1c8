"""Validating the measurements (Sec. 4, Fig. 3, Fig. 4, Fig. 7).

- `pools`: controlled contexts with designed necessary passages and padding (`ascp pools`);
- `experiment`: every estimator over those contexts, fixed and free protocols (`ascp validate-probe`);
- `analysis`: AUC, cover@m gain over random, operating-point transfer, cluster bootstrap;
- `report`: the markdown tables and the figure;
- `calibration`: the width-invariant used threshold and the width elasticity (`ascp calibrate`);
- `judge`: the identity-blinded LLM-judge meta-evaluation of ECR (`ascp judge`).

See docs/validation.md, docs/calibration.md and docs/judge.md.
"""
