"""Reports from experiment run stores: paper-layout tables (markdown, LaTeX), PNG figures, an HTML page.

    from ascp.report import write_report
    write_report("runs/grid")            # -> runs/grid/report/{index.html, report.md, tables/, figures/}

See docs/reports.md for which table each kind of run produces.
"""

from ascp.report.build import Report, build_tables, write_report

__all__ = ["Report", "build_tables", "write_report"]
