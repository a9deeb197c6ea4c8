"""Write a changed ``ModelConfig`` over the user's ``config.pbtxt`` text, keeping the comments
and layout of every top-level field that did not change.

protobuf's text format cannot carry comments through a parse: ``MessageToString`` writes
canonical text. So the original text is split into its top-level fields with protobuf's own
``text_format.Tokenizer`` (it knows strings, comments and brackets; nothing here parses
values), each field whose value changed is replaced by the canonical text of that field
alone, a field that is gone is cut out, and a new one is added at the end. The result is
parsed again and must equal the config; when it does not (text the splitter does not follow,
such as extension fields), the whole file is canonical and ``PatchedText.canonical`` says so.
Comments inside a replaced field are lost: ``lost_comments`` names them before anything is
written. The same tokenizer places a validation problem's field path at its line
(``field_line``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from tritonclient.grpc.model_config_pb2 import ModelConfig

__all__ = ["PatchedText", "field_line", "patch_pbtxt"]

_OPEN = frozenset("{<[")
_CLOSE = frozenset("}>]")
_EMPTY_BLOCK = re.compile(r"\{\n *\}")


@dataclass(frozen=True)
class PatchedText:
    """The text to write, and what of the original it does not keep."""

    text: str
    #: top-level fields written in canonical form (changed, added or removed)
    rewritten: tuple[str, ...]
    #: comments of the original that the new text no longer has
    lost_comments: tuple[str, ...]
    #: the layout could not be kept: ``text`` is the whole config in canonical form
    canonical: bool


@dataclass(frozen=True)
class _Span:
    """One top-level field in the text: ``name``, from its name to the end of its value."""

    name: str
    start: int
    end: int


def patch_pbtxt(original: str, config: ModelConfig) -> PatchedText:
    """``config`` as text that keeps ``original`` wherever the value did not change."""
    before = _parse(original)
    spans = _spans(original) if before is not None else None
    if before is None or spans is None:
        return _canonical(original, config)
    changed = [f for f in ModelConfig.DESCRIPTOR.fields if _only(before, f) != _only(config, f)]
    if not changed:
        return PatchedText(original, (), (), canonical=False)
    text = _rewrite(original, spans, {f.name: _field_text(config, f) for f in changed})
    if _parse(text) != config:
        return _canonical(original, config)
    names = tuple(f.name for f in changed)
    return PatchedText(text, names, _lost(original, text), canonical=False)


def _parse(text: str) -> ModelConfig | None:
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError:
        return None
    return config


def _canonical(original: str, config: ModelConfig) -> PatchedText:
    text = str(text_format.MessageToString(config, as_utf8=True))
    names = tuple(f.name for f, _ in config.ListFields())
    return PatchedText(text, names, _lost(original, text), canonical=True)


def _only(config: ModelConfig, field: FieldDescriptor) -> ModelConfig:
    """A config holding just ``field`` of ``config`` (to compare or print that field alone)."""
    single = ModelConfig()
    single.CopyFrom(config)
    for other in ModelConfig.DESCRIPTOR.fields:
        if other.name != field.name:
            single.ClearField(other.name)
    return single


def _field_text(config: ModelConfig, field: FieldDescriptor) -> str:
    """The canonical text of one field ("" when it is unset), an empty block on one line
    (``dynamic_batching { }``: set, with every value at its default)."""
    text = str(text_format.MessageToString(_only(config, field), as_utf8=True))
    # a newline is never inside a value (strings escape it), so this touches only layout
    return _EMPTY_BLOCK.sub("{ }", text)


def field_line(text: str, field: str) -> int | None:
    """The 1-based line of ``text`` where a problem's ``field`` path is written.

    Each step of the path is followed into the text: ``output[0].dims`` is the ``dims`` of the
    first ``output`` element, whether the outputs are written as one ``output [...]`` list or as
    separate ``output {...}`` blocks, and a map's ``[key]`` is the entry with that key. When a
    step is not written (a default, or a check about the block as a whole) the line of the
    innermost step found is given. ``None`` when the text has no such top-level field or cannot
    be followed."""
    try:
        fields = _Tokens(text).fields()
    except text_format.ParseError:
        return None
    offset = None
    for name, key in _steps(field):
        found = _find(fields, name, key)
        if found is None:
            break
        offset, value = found
        if value is None or not isinstance(value.content, list):
            break
        fields = value.content
    return None if offset is None else text.count("\n", 0, offset) + 1


@dataclass(frozen=True)
class _Value:
    """One value in the text: its offset, and its scalar token or the fields of its block."""

    offset: int
    content: str | list[_Field]


@dataclass(frozen=True)
class _Field:
    """One written field: where its name starts, and its values (a list gives several)."""

    name: str
    offset: int
    values: list[_Value]


def _steps(field: str) -> list[tuple[str, str | None]]:
    """``a[1].b`` as ``[("a", "1"), ("b", None)]``."""
    steps: list[tuple[str, str | None]] = []
    for step in field.split("."):
        name, bracket, key = step.partition("[")
        steps.append((name, key.rstrip("]") if bracket else None))
    return steps


def _find(fields: list[_Field], name: str, key: str | None) -> tuple[int, _Value | None] | None:
    """Where step ``name[key]`` is written, and its value (``None`` when that element is not
    written: then the offset is the field's own)."""
    written = [f for f in fields if f.name == name]
    if not written:
        # in a map's entry, the path's next step is inside the entry's ``value``
        inner = [v.content for f in fields if f.name == "value" for v in f.values]
        blocks = [content for content in inner if isinstance(content, list)]
        return _find(blocks[0], name, key) if blocks else None
    values = [value for f in written for value in f.values]
    if key is None:
        return written[0].offset, values[0] if values else None
    value = _element(values, key)
    return (written[0].offset, None) if value is None else (value.offset, value)


def _element(values: list[_Value], key: str) -> _Value | None:
    """A map's entry whose ``key`` is ``key``, else element number ``key`` of a list."""
    for value in values:
        if isinstance(value.content, list):
            keys = [v.content for f in value.content if f.name == "key" for v in f.values]
            if any(isinstance(k, str) and k.strip("'\"") == key for k in keys):
                return value
    if not key.isdigit() or int(key) >= len(values):
        return None
    return values[int(key)]


# -- splitting the text into top-level fields -------------------------------------------------
def _spans(text: str) -> list[_Span] | None:
    """Every top-level field of ``text`` in order, or ``None`` when the splitter cannot follow."""
    tokens = _Tokens(text)
    spans = []
    try:
        while not tokens.at_end():
            start = tokens.offset()
            name = tokens.tokenizer.ConsumeIdentifier()
            tokens.tokenizer.TryConsume(":")
            end = tokens.skip_value()
            if tokens.token() in (",", ";"):
                end = tokens.advance()
            spans.append(_Span(name, start, end))
    except text_format.ParseError:
        return None
    return spans


class _Tokens:
    """protobuf's tokenizer, with the offset of each token in the text."""

    def __init__(self, text: str, *, skip_comments: bool = True) -> None:
        lines = text.split("\n")
        self._line_starts = [0]
        for line in lines[:-1]:
            self._line_starts.append(self._line_starts[-1] + len(line) + 1)
        self.tokenizer = text_format.Tokenizer(lines, skip_comments=skip_comments)

    def token(self) -> str:
        return str(self.tokenizer.token)

    def at_end(self) -> bool:
        return bool(self.tokenizer.AtEnd())

    def offset(self) -> int:
        # The tokenizer tells where its current token is only through the error it would raise.
        where = self.tokenizer.ParseError("")
        return self._line_starts[where.GetLine() - 1] + where.GetColumn() - 1

    def advance(self) -> int:
        """Step over the current token; returns the offset just after it."""
        end = self.offset() + len(self.token())
        self.tokenizer.NextToken()
        return end

    def fields(self, closing: str = "") -> list[_Field]:
        """The fields from here to ``closing`` (or the end), with where each value is."""
        fields = []
        while self.token() != closing:  # at the end the token is ""
            if self.at_end():
                raise self.tokenizer.ParseError("unbalanced brackets")
            offset = self.offset()
            name = self.tokenizer.ConsumeIdentifier()
            self.tokenizer.TryConsume(":")
            if self.tokenizer.TryConsume("["):
                values = []
                while not self.tokenizer.TryConsume("]"):
                    values.append(self.value())
                    self.tokenizer.TryConsume(",")
            else:
                values = [self.value()]
            fields.append(_Field(name, offset, values))
            if not self.tokenizer.TryConsume(","):
                self.tokenizer.TryConsume(";")
        return fields

    def value(self) -> _Value:
        """One scalar (adjacent strings are one) or one ``{...}``/``<...>`` block."""
        offset = self.offset()
        if self.token() in ("{", "<"):
            closing = "}" if self.token() == "{" else ">"
            self.advance()
            fields = self.fields(closing)
            self.advance()
            return _Value(offset, fields)
        text = self.token()
        self.skip_value()
        return _Value(offset, text)

    def skip_value(self) -> int:
        """Step over one value (a scalar, adjacent strings, or a bracketed block)."""
        if self.at_end():
            raise self.tokenizer.ParseError("expected a value")
        if self.token() not in _OPEN:
            end = self.advance()
            while self.token()[:1] in ("'", '"'):
                end = self.advance()
            return end
        depth = 0
        while True:
            if self.at_end():
                raise self.tokenizer.ParseError("unbalanced brackets")
            depth += (self.token() in _OPEN) - (self.token() in _CLOSE)
            end = self.advance()
            if depth == 0:
                return end


# -- rewriting --------------------------------------------------------------------------------
def _rewrite(original: str, spans: list[_Span], replacements: dict[str, str]) -> str:
    """Replace the first occurrence of each changed field, cut the others, append new fields."""
    pieces, cursor, written = [], 0, set()
    for span in spans:
        if span.name not in replacements:
            continue
        replacement = replacements[span.name].rstrip("\n")
        start, end = span.start, span.end
        if span.name in written or not replacement:
            start, end = _whole_lines(original, start, end)
            replacement = ""
        pieces += [original[cursor:start], replacement]
        written.add(span.name)
        cursor = end
    text = "".join([*pieces, original[cursor:]])
    added = [t for name, t in replacements.items() if name not in written and t]
    if added and text and not text.endswith("\n"):
        text += "\n"
    return text + "".join(added)


def _whole_lines(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen a span to its whole lines when nothing else stands on them (to cut it cleanly)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    if text[line_start:start].strip() or text[end:line_end].strip():
        return start, end
    return line_start, line_end


def _comments(text: str) -> Counter[str]:
    tokens = _Tokens(text, skip_comments=False)
    found: Counter[str] = Counter()
    while not tokens.at_end():
        if tokens.token().startswith("#"):
            found[tokens.token().strip()] += 1
        tokens.tokenizer.NextToken()
    return found


def _lost(original: str, text: str) -> tuple[str, ...]:
    return tuple((_comments(original) - _comments(text)).elements())
