"""Results on disk: the record format run folders and experiment stores share (`records`) and the
one reader of every results folder (`reader.read_results`), below every stage that reads them."""

from ascp.results.reader import KINDS, Results, Unit, read_results
from ascp.results.records import UnitKey, keep_first

__all__ = ["KINDS", "Results", "Unit", "UnitKey", "keep_first", "read_results"]
