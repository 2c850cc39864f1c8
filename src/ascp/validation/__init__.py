"""Validating the causal probe on controlled pools (Sec. 4, Appendix C).

- `pools`: controlled contexts with designed necessary passages and padding (`ascp pools`);
- `experiment`: every estimator over those contexts, fixed and free protocols (`ascp validate-probe`);
- `analysis`: AUC, cover@m gain over random, operating-point transfer, cluster bootstrap;
- `report`: the markdown tables and the figure.

See docs/validation.md.
"""
