"""The HTML page every HTML report shares (``dlprof analyze`` and ``dlprof sweep``): its style sheet, escaping,
tables, figures and the page around them. Self-contained: no scripts, nothing fetched."""

from __future__ import annotations

from html import escape

CSS = """
:root { color-scheme: light; }
body { margin: 0; background: #f6f7f9; color: #1d2228;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1040px; margin: 0 auto; padding: 24px 28px 48px; background: #fff; }
h1 { font-size: 1.6em; margin: 0 0 4px; }
h2 { font-size: 1.35em; margin: 40px 0 4px; padding-top: 16px; border-top: 2px solid #e3e6ea; }
h1 + section h2, h1 + h2 { border-top: none; margin-top: 12px; padding-top: 0; }
h3 { font-size: 1.1em; margin: 24px 0 8px; }
.sub { color: #5b6570; font-size: 0.9em; margin: 0 0 12px; word-break: break-all; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; }
.verdict { padding: 10px 14px; border-radius: 6px; font-weight: 600; margin: 12px 0; border-left: 6px solid; }
.verdict.bad { background: #fdecea; border-color: #d62728; }
.verdict.warn { background: #fff6e0; border-color: #e0a000; }
.verdict.good { background: #e9f6ec; border-color: #2ca02c; }
.note { background: #fff6e0; padding: 6px 10px; border-radius: 4px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.92em; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e6ea; text-align: right; vertical-align: top; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f0f2f5; }
table.facts td { text-align: left; }
table.facts th { text-align: left; color: #5b6570; font-weight: normal; white-space: nowrap; }
tr.total td { font-weight: 600; }
tr.chosen td { background: #eaf2fb; font-weight: 600; }
.rec { border: 1px solid #cfd8e3; background: #f7faff; border-radius: 6px; padding: 10px 16px; margin: 16px 0; }
.rec .settings { font-size: 1.05em; margin: 4px 0 8px; }
.rec ul { margin: 4px 0 8px; padding-left: 22px; }
.rec h3 { margin-top: 4px; }
tr.slowest td { font-weight: 600; background: #fff4e5; }
figure { margin: 20px 0; }
figcaption { color: #5b6570; font-size: 0.9em; margin-top: 4px; }
svg { width: 100%; height: auto; display: block; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #1d2228; }
details { margin: 16px 0; }
summary { cursor: pointer; font-weight: 600; }
"""


def esc(value: object) -> str:
    """Text or an attribute value, escaped for HTML."""
    return escape(str(value), quote=True)


def table(header: list[str], rows: list[list[str]], row_classes: list[str] | None = None, cls: str = "") -> str:
    """A table; cells are escaped here, so callers pass plain text."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        row_cls = row_classes[i] if row_classes and row_classes[i] else ""
        attr = f' class="{row_cls}"' if row_cls else ""
        body.append(f"<tr{attr}>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    cls_attr = f' class="{cls}"' if cls else ""
    return f"<table{cls_attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def figure(picture: str, caption: str) -> str:
    """A picture (SVG markup) with its caption (markup)."""
    return f"<figure>{picture}<figcaption>{caption}</figcaption></figure>"


def document(title: str, schema: str, body: list[str]) -> str:
    """The whole page: ``body`` (markup, one part a line) under a head with ``title`` and the result's ``schema``."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="dlprof ({esc(schema)})">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    )
