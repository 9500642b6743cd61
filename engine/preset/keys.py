"""How a preset key is declared: once, with its kind (type, bounds and the words of its error),
its default, what it means, its CLI flag where it has one, and the comment the writer puts
above it.

A key that is a field of a spec dataclass (spec.py) is declared on that field:

    input_len: int = setting(DEFAULT_INPUT_LEN, Int(hi=MAX_COUNT), "prompt tokens per request (random dataset)",
                             flag="--input-len", always=True)

and one whose value lands elsewhere (a [stop] rule, the [ramp] form keys) is a `Key` in its
table's tuple (tables.py, ramp_forms.py). From these declarations come the reading of a table
(`read_keys`, with its one-line errors), its writing (`write_keys`, toml_out.py), the keys a
table accepts (parse.py), and the key tables of docs/presets.md (`markdown_rows`;
tests/unit/engine/preset/test_keys.py holds the two equal).

Each kind checks a value through the typed getters of fields.py, so that its refusal reads
`FILE: [TABLE].KEY: expected WHAT, got VALUE`; `describe()` is the type column of the docs' table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .fields import Ctx, num

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

__all__ = [
    "Bool", "Custom", "Int", "Key", "Kind", "Number", "OneOf", "Seconds", "Text",
    "NO_DEFAULT", "build", "keys_of", "markdown_rows", "read_keys", "setting", "write_keys",
]


T = TypeVar("T")


class Kind:
    """How one value of a key is checked (`check`), and how the docs' type column says it
    (`describe`)."""

    def check(self, ctx: Ctx, label: str, value: object) -> object:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def to_toml(self, value: object) -> object:
        """The value as preset_to_toml writes it (parse reads it back to the same)."""
        return value


@dataclass(frozen=True)
class Int(Kind):
    """A whole number lo..hi (hi None: no bound above)."""

    lo: int = 1
    hi: int | None = None
    doc: str | None = None  # the docs' words when the bounds alone do not say it

    def check(self, ctx: Ctx, label: str, value: object) -> int:
        return ctx.integer(label, value, minimum=self.lo, maximum=self.hi)

    def describe(self) -> str:
        if self.doc is not None:
            return self.doc
        # a bound of 100000 or more is a sanity bound (MAX_CONCURRENCY, MAX_COUNT): the docs say "integer >= 1"
        return f"integer {self.lo}..{self.hi}" if self.hi is not None and self.hi < 10**5 else f"integer >= {self.lo}"


@dataclass(frozen=True)
class Seconds(Kind):
    """A time in seconds, at most MAX_SECONDS; 0 accepted when `zero_ok`."""

    zero_ok: bool = False
    doc: str | None = None

    def check(self, ctx: Ctx, label: str, value: object) -> float:
        return ctx.seconds(label, value, zero_ok=self.zero_ok)

    def describe(self) -> str:
        return self.doc or ("seconds >= 0" if self.zero_ok else "seconds > 0")

    def to_toml(self, value: object) -> object:
        return float(cast(float, value))


@dataclass(frozen=True)
class Number(Kind):
    """A finite number between lo and hi, each end open or closed; `what` is the refusal's words."""

    lo: float
    hi: float
    what: str
    doc: str
    lo_open: bool = True
    hi_open: bool = False

    def check(self, ctx: Ctx, label: str, value: object) -> float:
        return ctx.number(label, value, lo=self.lo, hi=self.hi, lo_open=self.lo_open, hi_open=self.hi_open, what=self.what)

    def describe(self) -> str:
        return self.doc

    def to_toml(self, value: object) -> object:
        return float(cast(float, value))


@dataclass(frozen=True)
class Bool(Kind):
    def check(self, ctx: Ctx, label: str, value: object) -> bool:
        return ctx.boolean(label, value)

    def describe(self) -> str:
        return "boolean"


@dataclass(frozen=True)
class Text(Kind):
    """A non-empty one-line string."""

    what: str = "a non-empty one-line string"

    def check(self, ctx: Ctx, label: str, value: object) -> str:
        return ctx.string(label, value, self.what)

    def describe(self) -> str:
        return "string"


@dataclass(frozen=True)
class OneOf(Kind):
    """One of a few strings."""

    values: tuple[str, ...]
    what: str

    def check(self, ctx: Ctx, label: str, value: object) -> str:
        if not isinstance(value, str) or value not in self.values:
            raise ctx.bad(label, self.what, value)
        return value

    def describe(self) -> str:
        return "string"


@dataclass(frozen=True)
class Custom(Kind):
    """A value checked by its own function `read(ctx, label, value)` (a URL, a dataset, a trace,
    request shaping), which gives the refusal's words."""

    read: Callable[[Ctx, str, object], object]
    doc: str
    write: Callable[[object], object] | None = None  # the value as TOML, when not as it is kept

    def check(self, ctx: Ctx, label: str, value: object) -> object:
        return self.read(ctx, label, value)

    def describe(self) -> str:
        return self.doc

    def to_toml(self, value: object) -> object:
        return value if self.write is None else self.write(value)


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()  # Any: it stands for a field's default of any type; no default (required, or "none")


@dataclass(frozen=True)
class Key:
    """One preset key. `kind` None: the key is read by its table's own code (the [ramp] forms),
    which gives the refusals; `doc_type` then says its type in the docs."""

    kind: Kind | None
    help: str  # what it means: the docs' meaning column
    table: str = ""  # "workload"; "" for the top level
    name: str = ""
    default: object = NO_DEFAULT  # the value when the key is absent
    doc_default: str | None = None  # the docs' default column where the value alone does not say it
    doc_type: str | None = None  # the docs' type column where the kind does not say it
    flag: str | None = None  # the command line's flag that sets the same thing
    comment: str | None = None  # the line preset_to_toml writes above the table when the key is written
    shaping: bool = False  # request shaping: a running session keeps its own (the TUI's p, `redline ctl preset`)
    always: bool = False  # preset_to_toml writes it even at its default
    row: str | None = None  # the docs table that lists it: None its table's, "" none (described in prose)

    @property
    def label(self) -> str:
        """How an error names it: `[workload].input_len`, `name` at the top."""
        return f"[{self.table}].{self.name}" if self.table else self.name

    def read(self, ctx: Ctx, value: object) -> object:
        """The value checked by the key's kind (a one-line PresetError naming the key if not)."""
        if self.kind is None:
            raise TypeError(f"{self.label} is read by its table's own code")
        return self.kind.check(ctx, self.label, value)

    def toml(self, value: object) -> object:
        """The value as preset_to_toml writes it."""
        return value if self.kind is None else self.kind.to_toml(value)

    @property
    def type_text(self) -> str:
        if self.doc_type is not None:
            return self.doc_type
        return self.kind.describe() if self.kind is not None else ""

    @property
    def default_text(self) -> str:
        """The docs' default column: `` `128` ``, `` `"chat"` ``, `` `false` ``, `none`."""
        if self.doc_default is not None:
            return self.doc_default
        d = self.default
        if d is NO_DEFAULT or d is None or d == ():
            return "none"
        if isinstance(d, bool):
            return f"`{str(d).lower()}`"
        if isinstance(d, str):
            return f'`"{d}"`'
        if isinstance(d, float):
            return f"`{num(d)}`"
        return f"`{d}`"


def setting(default: T, kind: Kind | None, help: str, *, doc_default: str | None = None, doc_type: str | None = None,
            flag: str | None = None, comment: str | None = None, shaping: bool = False, always: bool = False,
            row: str | None = None, repr: bool = True) -> T:
    """A spec dataclass field declared as a preset key (its table and name come from keys_of);
    `default` NO_DEFAULT: a field the dataclass requires."""
    key = Key(kind, help, doc_default=doc_default, doc_type=doc_type, flag=flag, comment=comment, shaping=shaping,
              always=always, row=row)
    if default is NO_DEFAULT:
        return cast(T, field(metadata={"key": key}, repr=repr))  # typeshed types field() with no default as Any
    return field(default=default, metadata={"key": key}, repr=repr)


def keys_of(cls: type, table: str) -> tuple[Key, ...]:
    """The keys a spec dataclass declares, in field order, with their table, name and default."""
    out = []
    for f in dataclasses.fields(cls):
        k = f.metadata.get("key")
        if isinstance(k, Key):
            default = NO_DEFAULT if f.default is dataclasses.MISSING else f.default
            out.append(dataclasses.replace(k, table=table, name=f.name, default=default))
    return tuple(out)


def build(cls: Callable[..., T], values: Mapping[str, object]) -> T:
    """`cls(**values)`: a spec built from the values its keys' kinds checked (each of its field's type)."""
    return cls(**values)


def read_keys(ctx: Ctx, keys: Iterable[Key], data: Mapping[str, object]) -> dict[str, object]:
    """The keys of `data` among `keys` (plain keys, each checked by its kind), in their declared
    order; a bad one raises its one-line PresetError."""
    return {k.name: k.read(ctx, data[k.name]) for k in keys if k.name in data}


def write_keys(keys: Iterable[Key], values: object) -> tuple[list[str], dict[str, object]]:
    """The keys preset_to_toml writes of a spec (`values`: its attributes): each one declared
    `always`, or not at its default; and the comment lines of those written."""
    out: dict[str, object] = {}
    comments: list[str] = []
    for k in keys:
        v = getattr(values, k.name)
        if k.always or v != k.default:
            out[k.name] = k.toml(v)
            if k.comment:
                comments.append(k.comment)
    return comments, out


def markdown_rows(keys: Iterable[Key], columns: Iterable[str]) -> list[str]:
    """The rows of a docs table of keys, one a line, e.g. `| `KEY` | TYPE | DEFAULT | MEANING |`
    for the columns ("key", "type", "default", "meaning")."""
    cell: dict[str, Callable[[Key], str]] = {
        "key": lambda k: f"`{k.name}`", "type": lambda k: k.type_text, "default": lambda k: k.default_text,
        "meaning": lambda k: k.help,
    }
    cols = list(columns)
    return ["| " + " | ".join(cell[c](k) for c in cols) + " |" for k in keys]
