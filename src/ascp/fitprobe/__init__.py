"""`ascp fit-probe`: fitting an attention map for one model. `fit` draws and reads contexts, fits the
map and sizes the gated band; `readings` keeps every context read (`ReadContext`) in the one record
log, so a fit resumes and divides across processes."""
