"""Test bases a plugin author runs against their own classes, pyterrier-style: subclass one in a
test file, name the registered policy or estimator, and pytest runs every check a built-in passes
(docs/extending.md). They drive the front door (`ascp.attribute`, `ascp.Probe`), so they live above
it, beside nothing that ascp itself imports."""

from ascp.testing.estimators import EstimatorContract
from ascp.testing.schedulers import SchedulerContract

__all__ = ["EstimatorContract", "SchedulerContract"]
