"""Render report tables as markdown, LaTeX (booktabs) and one static HTML page, and write a report
folder (`write_report_folder`: the one writer of `ascp report`, for run stores and simulations)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ascp.jsonio import json_safe, staged_folder
from ascp.render.markdown import markdown_table
from ascp.report.tables import Table

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_SYMBOLS = {"†": r"$^{\dagger}$", "Δ": r"$\Delta$", "κ": r"$\kappa$", "→": r"$\to$", "<": r"$<$",
                  "≤": r"$\leq$", "±": r"$\pm$"}


def to_markdown(table: Table) -> str:
    lines = [f"### {table.title}", "", table.caption, "", *markdown_table(table.header, table.rows)]
    return "\n".join(lines) + "\n"


def latex_escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in _LATEX_SPECIAL:
            out.append(_LATEX_SPECIAL[ch])
        elif ch in _LATEX_SYMBOLS:
            out.append(_LATEX_SYMBOLS[ch])
        else:
            out.append(ch)
    text = "".join(out)
    # a significance star right after a number is a superscript marker
    return text.replace("*", r"$^{*}$")


def to_latex(table: Table) -> str:
    """A booktabs `table` environment; numeric columns right-aligned."""
    def numeric(col: int) -> bool:
        values = [row[col] for row in table.rows if row[col] not in ("-", "")]
        return bool(values) and all(v.lstrip("+-[<").replace(".", "", 1)[:1].isdigit() for v in values)

    spec = "".join("r" if numeric(i) else "l" for i in range(len(table.header)))
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{latex_escape(table.title)}. {latex_escape(table.caption)}}}",
             rf"\label{{tab:{table.key}}}", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(h) for h in table.header) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_escape(c) for c in row) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def to_html_page(title: str, intro: Sequence[str], tables: Sequence[Table], figures: Sequence[tuple[str, str]]) -> str:
    """One self-contained page: the tables inline (with links to their .md/.tex files) and the figures."""
    esc = html.escape
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{esc(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:72em;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{padding:.2em .6em;border-bottom:1px solid #ccc;"
             "text-align:right}th:first-child,td:first-child{text-align:left}caption{caption-side:bottom;"
             "text-align:left;font-size:.9em;color:#444;padding-top:.4em}img{max-width:100%}</style></head><body>",
             f"<h1>{esc(title)}</h1>"]
    parts += [f"<p>{esc(line)}</p>" for line in intro]
    if tables:
        parts.append("<h2>Tables</h2><ul>" + "".join(
            f'<li><a href="#{esc(t.key)}">{esc(t.title)}</a></li>' for t in tables) + "</ul>")
    for t in tables:
        parts.append(f'<h3 id="{esc(t.key)}">{esc(t.title)}</h3>')
        links = f'<a href="tables/{esc(t.key)}.md">markdown</a> · <a href="tables/{esc(t.key)}.tex">LaTeX</a>'
        parts.append(f"<p>{links}</p>")
        parts.append("<table><caption>" + esc(t.caption) + "</caption><thead><tr>"
                     + "".join(f"<th>{esc(h)}</th>" for h in t.header) + "</tr></thead><tbody>")
        parts += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in t.rows]
        parts.append("</tbody></table>")
    if figures:
        parts.append("<h2>Figures</h2>")
        for path, caption in figures:
            parts.append(f'<figure><a href="{esc(path)}"><img src="{esc(path)}" alt="{esc(caption)}"></a>'
                         f"<figcaption>{esc(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


Figures = Sequence[tuple[str, str]]  # (path inside the report folder, caption)


def write_report_folder(out: Path, title: str, intro: Sequence[str], tables: Sequence[Table],
                        draw: Callable[[Path], Figures] | None = None) -> Figures:
    """Write the report `out` all or nothing: `tables/<key>.md` and `.tex` per table, `tables/tables.json`,
    the figures `draw(folder)` writes (it returns their paths and captions), `index.html` and `report.md`."""
    with staged_folder(out, whole=True) as tmp:
        (tmp / "tables").mkdir()
        for t in tables:
            (tmp / "tables" / f"{t.key}.md").write_text(to_markdown(t), encoding="utf-8")
            (tmp / "tables" / f"{t.key}.tex").write_text(to_latex(t), encoding="utf-8")
        (tmp / "tables" / "tables.json").write_text(json.dumps(
            json_safe({t.key: {"title": t.title, "caption": t.caption, "data": t.data} for t in tables}),
            indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        figures = list(draw(tmp)) if draw is not None else []
        (tmp / "index.html").write_text(to_html_page(title, intro, tables, figures), encoding="utf-8")
        md = [f"# {title}", "", *intro, ""]
        md += [to_markdown(t) for t in tables]
        md += [f"![{cap}]({path})\n\n{cap}\n" for path, cap in figures]
        (tmp / "report.md").write_text("\n".join(md), encoding="utf-8")
    return figures
