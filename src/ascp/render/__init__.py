"""One renderer for attributions and portfolios: the rows every view shows, as console tables
(`ascp.render.console`) and as self-contained HTML (notebooks' `_repr_html_`)."""

from ascp.render.html import attribution_html, portfolio_html
from ascp.render.rows import PassageRow, passage_rows

__all__ = ["PassageRow", "attribution_html", "passage_rows", "portfolio_html"]
