"""The interactive reply stream: Markdown rendered block by block as the reply arrives."""

from nanoagent.cli.render import MarkdownStream


def stream(plain=True):
    out: list[str] = []
    return MarkdownStream(out.append, 80, plain=plain), out


def test_a_paragraph_is_printed_as_soon_as_a_blank_line_ends_it():
    md, out = stream()
    md.feed("First paragraph")
    assert out == []
    md.feed(" ends here.\n\nSecond")
    assert out == ["First paragraph ends here.\n\n"]
    md.flush()
    assert out[-1] == "Second\n"


def test_a_long_list_without_blank_lines_streams_line_by_line():
    md, out = stream()
    for i in range(10):
        md.feed(f"- item {i}\n")
    assert out, "a ten-line list must not wait for the end of the reply"
    md.flush()
    assert "".join(out) == "".join(f"- item {i}\n" for i in range(10))


def test_a_code_fence_is_never_split():
    md, out = stream()
    md.feed("```python\n" + "".join(f"x = {i}\n" for i in range(10)) + "\nmore = 1\n")
    assert out == []
    md.feed("```\n\nafter")
    assert out and out[0].startswith("```python") and out[0].rstrip().endswith("```")


def test_a_table_is_kept_whole():
    md, out = stream()
    md.feed("| a | b |\n|---|---|\n" + "".join(f"| {i} | {i} |\n" for i in range(8)))
    assert out == []
    md.flush()
    assert out[0].count("\n") == 10


def test_rendered_markdown_shows_bullets_not_markup():
    md, out = stream(plain=False)
    md.feed("Some **bold** text.\n\n")
    assert "**" not in out[0] and "bold" in out[0]


def test_a_long_paragraph_streams_sentence_by_sentence():
    md, out = stream()
    sentences = [f"Sentence number {i} says something moderately long about the garden. " for i in range(12)]
    for sentence in sentences:
        md.feed(sentence)
    assert out, "a 12-sentence paragraph must not wait for the end of the reply"
    assert all(piece.rstrip().endswith(".") for piece in out)
    md.flush()
    assert "".join(out).replace("\n", " ").split() == "".join(sentences).split()


def test_a_sentence_cut_never_splits_bold_or_code_spans():
    md, out = stream()
    md.feed("**This bold run. " + "keeps going for a long while. " * 12)
    assert out == []
