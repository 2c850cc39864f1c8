"""The one report writer (`ascp.report.render.write_report_folder`) and the one markdown table."""

from __future__ import annotations

import json

import pytest

from ascp.render.markdown import markdown_table
from ascp.report.render import to_markdown, write_report_folder
from ascp.report.tables import Table


def test_markdown_table_escapes_pipes_and_is_what_every_report_uses():
    from ascp.report import build, simulation
    from ascp.validation import report as validation_report

    assert markdown_table(["a", "b|c"], [["1", "x|y"]]) == ["| a | b\\|c |", "|---|---|", "| 1 | x\\|y |"]
    assert validation_report.markdown_table is markdown_table
    assert build.write_report_folder is write_report_folder is simulation.write_report_folder


def _table() -> Table:
    return Table("t1", "A title", "A caption.", ["policy", "ECR"], [["ascp", "0.5"]], {"ascp": {"ecr": 0.5}})


def test_the_writer_writes_every_format_and_the_figures_it_is_given(tmp_path):
    def draw(folder):
        (folder / "figures").mkdir()
        (folder / "figures" / "f.png").write_bytes(b"png")
        return [("figures/f.png", "a figure")]

    out = tmp_path / "report"
    figures = write_report_folder(out, "Title", ["intro line"], [_table()], draw)
    assert figures == [("figures/f.png", "a figure")]
    assert sorted(p.name for p in (out / "tables").iterdir()) == ["t1.md", "t1.tex", "tables.json"]
    assert (out / "tables" / "t1.md").read_text() == to_markdown(_table())
    assert json.loads((out / "tables" / "tables.json").read_text())["t1"]["data"] == {"ascp": {"ecr": 0.5}}
    md = (out / "report.md").read_text()
    assert md.startswith("# Title\n\nintro line\n\n### A title") and "![a figure](figures/f.png)" in md
    assert 'src="figures/f.png"' in (out / "index.html").read_text()


def test_the_writer_leaves_the_previous_report_when_a_figure_fails(tmp_path):
    out = tmp_path / "report"
    write_report_folder(out, "Old", [], [_table()])
    before = (out / "report.md").read_text()

    def broken(folder):
        raise RuntimeError("figure failed")

    with pytest.raises(RuntimeError):
        write_report_folder(out, "New", [], [_table()], broken)
    assert (out / "report.md").read_text() == before
