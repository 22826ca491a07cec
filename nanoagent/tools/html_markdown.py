"""HTML to Markdown with html-to-markdown (a Rust core: ~0.15 s for a 1 MB page), imported on first use."""

from __future__ import annotations

from types import ModuleType

from nanoagent.tools.base import ToolError

MISSING_CONVERTER = ("Reading HTML needs the html-to-markdown package, which is not installed; "
                     "install it with `pip install 'nanoagent[web]'` (or `pip install html-to-markdown`).")


def load_converter() -> ModuleType:
    """The html-to-markdown module, imported on first use (not at startup)."""
    try:
        import html_to_markdown
    except ImportError:
        raise ToolError(MISSING_CONVERTER) from None
    return html_to_markdown


def html_to_markdown(html: str) -> tuple[str, str | None]:
    """(Markdown, title) for an HTML page: navigation, forms, scripts and hidden parts left out."""
    h2m = load_converter()
    options = h2m.ConversionOptions(extract_metadata=True, preprocessing=h2m.PreprocessingOptions(),
                                    inline_data_media="alt_text_only")
    try:
        result = h2m.convert(html, options)
    except h2m.ConversionError as e:
        raise ToolError(f"The page's HTML could not be converted ({e}); try another URL.") from None
    return _without_front_matter(result.content or ""), (result.metadata.document.title or None)


def _without_front_matter(markdown: str) -> str:
    """The converter puts the page's metadata first as a `---` block; the title goes in the header instead.
    A page's own text never starts that way: the converter escapes a leading `---` as `\\---`."""
    if markdown.startswith("---\n"):
        end = markdown.find("\n---\n", 4)
        if end != -1:
            return markdown[end + 5:].lstrip("\n")
    return markdown
