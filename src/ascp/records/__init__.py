"""Records on disk: the record format run folders and experiment stores share (`format`: file names,
unit keys, the one duplicate rule) and the one reader of every results folder (`reader.read_results`),
below every stage that writes or reads them. The writers stay with their stages (`ascp.loop.runfolder`,
`ascp.experiments.store`); `ascp.report` turns what this reads into tables, `ascp.render` draws."""

from ascp.records.format import UnitKey, keep_first
from ascp.records.reader import KINDS, Results, Unit, read_results

__all__ = ["KINDS", "Results", "Unit", "UnitKey", "keep_first", "read_results"]
