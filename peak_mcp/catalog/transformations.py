"""The natural-transformation catalog: Markdown files with YAML front matter (transformations/*.md).

A file is one transformation: front matter (id, title, backends, dtypes, traits, problems, devices, tags,
after, extends, measured, summary) and a body, the instruction an LLM follows to rewrite the current kernel. Shipped
files come first; files from extra directories are the user's and override a shipped file with the same id. A
malformed file is reported (file, field, message) and skipped; it never stops the rest from loading.

Which problems a text is for: `traits` (peak_mcp/problems/traits.py: row_reduction, gemm, ...; `any`), matched
against the problem's traits, so a text reaches every problem of its kind (an imported LayerNorm gets the row
texts); `problems` (names) still works and adds those problems. A text that gives neither applies to any problem.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from peak_mcp.catalog.rendering import FENCE_LANGUAGES, code_examples
from peak_mcp.core.devices import Device
from peak_mcp.core.errors import InvalidInput, NotFound
from peak_mcp.core.resources import data_dir
from peak_mcp.problems.traits import ANY, TRAITS, unknown

BACKENDS = ("cuda", "hip", "hlsl")


DTYPES = ("f32", "f16", "bf16")


SECTIONS = ("When it applies", "What to do", "Keep unchanged", "Pitfalls", "Expected effect")


FRONT_MATTER_FIELDS = frozenset({"id", "title", "backends", "dtypes", "traits", "problems", "devices", "tags",
                                 "after", "extends", "measured", "summary"})


_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


_FRONT = re.compile(r"\A---[ \t]*\r?\n(?P<yaml>.*?)^---[ \t]*(?:\r?\n|\Z)(?P<body>.*)\Z", re.DOTALL | re.MULTILINE)


class CatalogError(BaseModel):
    """One finding about one file: `error` (the file was skipped), `warning` (loaded) or `note`."""

    file: str
    field: str | None = None
    message: str
    level: Literal["error", "warning", "note"] = "error"

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{self.level}: {where}: {self.message}"


class Measurement(BaseModel):
    """A text's own measurement on one device: the transformed kernel's speed over its parent, and the problem and
    backend it was measured on (a figure quoted without them reads as this session's)."""

    model_config = ConfigDict(extra="forbid")

    speed: float = Field(gt=0, lt=1000)
    problem: str | None = None
    dtype: Literal["f32", "f16", "bf16"] | None = None
    backend: Literal["cuda", "hip", "hlsl"] | None = None


class Transformation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    title: str = Field(min_length=1)
    backends: list[Literal["cuda", "hip", "hlsl"]] = Field(min_length=1)
    dtypes: list[Literal["f32", "f16", "bf16"]] = Field(default_factory=list)  # empty: every dtype
    # The problem traits it applies to (`any`: every problem), and problems it names besides; both empty: any.
    traits: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    devices: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    after: list[str] = Field(default_factory=list)
    extends: str | None = None
    # The text's own measurements, as its Expected effect reports them: device pattern (as in `devices`) -> the
    # speed of the transformed kernel over its parent there (0.29: a slowdown), or that with where it was measured
    # (`{speed: 0.43, problem: row_sum, dtype: f32, backend: hlsl}`). suggest_next ranks a text measured slower on the
    # session's device after the rest, and quotes the figure only with its problem and backend.
    measured: dict[str, Measurement] = Field(default_factory=dict)
    summary: str = Field(min_length=1)
    body: str = Field(min_length=1)
    source: Path
    builtin: bool
    raw: str = Field(repr=False)

    @field_validator("id")
    @classmethod
    def _kebab(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(f"{value!r} is not kebab-case (lowercase letters, digits and single hyphens)")
        return value

    @field_validator("measured", mode="before")
    @classmethod
    def _speeds(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        plain = {k: v for k, v in value.items() if not isinstance(v, Mapping)}
        bad = [f"{k}: {v}" for k, v in plain.items()
               if not isinstance(v, int | float) or not 0 < v < 1000 or not str(k).strip()]
        if bad:
            raise ValueError(f"each entry is a device pattern and its speed over the parent (0.29, 1.5), or "
                             f"{{speed: 0.29, problem: softmax, backend: hlsl}}; not {bad}")
        return {k: {"speed": v} if k in plain else v for k, v in value.items()}

    @field_validator("traits", "problems", "devices", "tags", "after", "dtypes", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        if value is None:
            return []
        return [value] if isinstance(value, str) else value

    def raw_text(self) -> str:
        """The whole Markdown file, front matter included."""
        return self.raw

    @property
    def for_any_problem(self) -> bool:
        return ANY in self.traits or ANY in self.problems or not (self.traits or self.problems)

    def for_problem(self, problem: str | None, traits: Iterable[str] = ()) -> bool:
        """For a problem named `problem` with `traits`: the text is for any problem, shares a trait or names it."""
        return (problem is None or self.for_any_problem or problem in self.problems
                or not set(self.traits).isdisjoint(traits))

    def scope(self) -> str:
        """What the text is written for, in words: "traits gemm, convolution", "problems matmul", "any problem"."""
        if self.for_any_problem:
            return "any problem"
        said = [f"traits {', '.join(self.traits)}"] if self.traits else []
        said += [f"problems {', '.join(self.problems)}"] if self.problems else []
        return " and ".join(said)

    def for_dtype(self, dtype: str | None) -> bool:
        return dtype is None or not self.dtypes or dtype.lower() in self.dtypes

    def for_backend(self, backend: str | None) -> bool:
        return backend is None or backend.lower() in self.backends

    def measured_on(self, device: DeviceDescriptor | None) -> tuple[str, float] | None:
        """The text's measurement on `device` (pattern, speed over the parent), if it records one."""
        if device is None:
            return None
        return next(((p, m.speed) for p, m in self.measured.items() if device.matches(p)), None)

    def measured_where(self, pattern: str) -> str | None:
        """Where the text's measurement on `pattern` was taken ("row_sum f32 hlsl"), None when it does not say."""
        m = self.measured.get(pattern)
        if m is None:
            return None
        return " ".join(w for w in (m.problem, m.dtype, m.backend) if w) or None

    def for_device(self, device: DeviceDescriptor | None) -> bool:
        """Portable texts (no devices) match every device; device texts need a known device that matches."""
        if not self.devices:
            return True
        return device is not None and any(device.matches(p) for p in self.devices)


@dataclass(frozen=True)
class DeviceDescriptor:
    """What a device is called: full name ("NVIDIA H100 80GB HBM3"), arch ("sm_90a", "gfx942"), family ("hopper")."""

    name: str = ""
    arch: str = ""
    family: str = ""

    @classmethod
    def of(cls, device: DeviceLike) -> DeviceDescriptor | None:
        if device is None or isinstance(device, DeviceDescriptor):
            return device
        if isinstance(device, str):
            return cls(name=device)
        if not isinstance(device, Mapping):  # a devices.Device
            return cls(name=device.name, arch=device.arch, family=device.family)
        return cls(name=str(device.get("name") or ""), arch=str(device.get("arch") or ""),
                   family=str(device.get("family") or device.get("arch_family") or ""))

    def matches(self, pattern: str) -> bool:
        """Case-insensitive: the family or arch equals the pattern (globs allowed), or the name contains it.
        An NVIDIA arch with a feature suffix (sm_90a) also matches its base (sm_90)."""
        pat = pattern.strip().lower()
        if not pat:
            return False
        arch = self.arch.lower()
        base = re.sub(r"^(sm_\d+)[a-z]$", r"\1", arch)
        names = [n for n in (self.family.lower(), arch, base) if n]
        return any(fnmatch.fnmatchcase(n, pat) for n in names) or (bool(self.name) and pat in self.name.lower())


# Whatever names a device: a descriptor, a described Device, a mapping with name/arch/family, or a name.
DeviceLike = DeviceDescriptor | Device | Mapping[str, Any] | str | None


def builtin_transformations_dir() -> Path:
    """The shipped catalog: peak_mcp/_data/transformations in a wheel, else the checkout's transformations/."""
    return data_dir("transformations")


def parse_file(path: Path, *, builtin: bool) -> tuple[Transformation | None, list[CatalogError]]:
    """One Markdown file -> a Transformation, or None and the errors that say why not."""
    name = str(path)

    def error(field: str | None, message: str, level: str = "error") -> CatalogError:
        return CatalogError(file=name, field=field, message=message, level=level)  # type: ignore[arg-type]

    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [error(None, f"cannot read the file: {exc}")]
    match = _FRONT.match(raw)
    if not match:
        return None, [error("front matter", "the file must start with a YAML front matter block between '---' "
                                            "lines")]
    try:
        meta = yaml.safe_load(match.group("yaml"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [error("front matter", f"invalid YAML{where}: {problem}")]
    if not isinstance(meta, dict):
        return None, [error("front matter", "the front matter must be a mapping of fields")]
    findings: list[CatalogError] = []
    fields = {str(k): v for k, v in meta.items()}
    for key in sorted(set(fields) - FRONT_MATTER_FIELDS):
        findings.append(error(key, "unknown field, ignored", "warning"))
        del fields[key]
    body = match.group("body").strip()
    try:
        item = Transformation(**fields, body=body, source=path, builtin=builtin, raw=raw)
    except ValidationError as exc:
        errors = []
        for problem in exc.errors():
            loc = problem["loc"]
            field = str(loc[0]) if loc else None
            if field == "body":
                message = "the body (the instruction text after the front matter) is empty"
            elif problem["type"] == "missing":
                message = "required field is missing"
            elif field == "backends" and problem["type"] == "literal_error":
                message = f"unknown backend {problem.get('input')!r}; use {', '.join(BACKENDS)}"
            elif field == "dtypes" and problem["type"] == "literal_error":
                message = f"unknown dtype {problem.get('input')!r}; use {', '.join(DTYPES)}"
            else:
                message = problem["msg"]
            errors.append(error(field, message))
        return None, findings + errors
    if item.id != path.stem:
        return None, [*findings, error("id", f"id {item.id!r} must equal the file name stem {path.stem!r}")]
    if unknown(item.traits, allow_any=True):
        findings.append(error("traits", f"unknown trait(s) {', '.join(unknown(item.traits, allow_any=True))}, "
                                        f"which no problem has; the vocabulary: {', '.join(TRAITS)}, or any",
                              "warning"))
    missing = [s for s in SECTIONS if not re.search(rf"^#+\s*{re.escape(s)}\b", body, re.MULTILINE | re.IGNORECASE)]
    if missing:
        findings.append(error("body", f"missing section(s): {', '.join(missing)}", "warning"))
    for example in code_examples(body):
        if example.language not in FENCE_LANGUAGES:
            findings.append(error("body", f"the code block at body line {example.line} has language "
                                          f"{example.language or 'none'!r}; tag it ```cuda, ```hlsl or ```text "
                                          "(pseudo-code) so it can be checked", "warning"))
    return item, findings


class Catalog:
    def __init__(self, items: Iterable[Transformation] = (), findings: Iterable[CatalogError] = (),
                 dirs: Iterable[Path] = ()) -> None:
        self._items = {t.id: t for t in items}
        self.findings = list(findings)
        self.dirs = list(dirs)

    # --- loading -----------------------------------------------------------------------------------------
    @classmethod
    def load(cls, builtin_dir: Path | None = None, extra_dirs: Iterable[Path | str] = ()) -> Catalog:
        """Shipped files from `builtin_dir`, then each extra directory in order (the user's files)."""
        layers = [(Path(builtin_dir), True)] if builtin_dir is not None else []
        layers += [(Path(d).expanduser(), False) for d in extra_dirs]
        items: dict[str, Transformation] = {}
        findings: list[CatalogError] = []
        for directory, builtin in layers:
            if not directory.is_dir():
                findings.append(CatalogError(file=str(directory), message="catalog directory not found"))
                continue
            for path in sorted(directory.glob("*.md")):
                if not path.is_file():  # a FIFO or device named x.md would block start-up on open()
                    findings.append(CatalogError(file=str(path), message="not a regular file; skipped"))
                    continue
                item, found = parse_file(path, builtin=builtin)
                findings += found
                if item is None:
                    continue
                previous = items.get(item.id)
                if previous is not None and not (previous.builtin and not builtin):
                    findings.append(CatalogError(file=str(path), field="id",
                                                 message=f"duplicate id {item.id!r}, already defined by "
                                                         f"{previous.source}; this file is ignored"))
                    continue
                if previous is not None:
                    findings.append(CatalogError(file=str(path), field="id", level="note",
                                                 message=f"overrides the shipped {item.id!r} ({previous.source})"))
                items[item.id] = item
        findings += _drop_bad_links(items)
        return cls(items.values(), findings, [d for d, _ in layers])

    @property
    def errors(self) -> list[CatalogError]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[CatalogError]:
        return [f for f in self.findings if f.level == "warning"]

    @property
    def notes(self) -> list[CatalogError]:
        return [f for f in self.findings if f.level == "note"]

    def info(self) -> dict[str, Any]:
        return {"transformations": len(self._items), "dirs": [str(d) for d in self.dirs],
                "user": sorted(t.id for t in self._items.values() if not t.builtin),
                "errors": [str(e) for e in self.errors], "warnings": [str(w) for w in self.warnings],
                "notes": [str(n) for n in self.notes]}

    # --- queries -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, id: object) -> bool:
        return id in self._items

    def get(self, id: str) -> Transformation:
        try:
            return self._items[id]
        except KeyError:
            close = difflib.get_close_matches(id, list(self._items), n=4, cutoff=0.5)
            hint = (f"did you mean {', '.join(close)}? " if close else "") + "list_transformations shows every id."
            raise NotFound(f"no transformation with id {id!r}", hint) from None

    def list(self, backend: str | None = None, device: DeviceLike = None,
             problem: str | None = None, tag: str | None = None, text: str | None = None,
             dtype: str | None = None, traits: Iterable[str] = ()) -> list[Transformation]:
        """The texts that match every filter given; `problem` with its `traits` (a text sharing one matches)."""
        traits = tuple(traits)
        dev = DeviceDescriptor.of(device)
        needle = text.lower() if text else None
        found = []
        for t in sorted(self._items.values(), key=lambda t: t.id):
            if backend and backend.lower() not in t.backends:
                continue
            if dev is not None and not t.for_device(dev):
                continue
            if problem and not t.for_problem(problem, traits):
                continue
            if not t.for_dtype(dtype):
                continue
            if tag and tag.lower() not in (x.lower() for x in t.tags):
                continue
            if needle and not any(needle in s.lower() for s in (t.id, t.title, t.summary, t.body)):
                continue
            found.append(t)
        return found

    def empty_note(self, backend: str | None, problem: str | None, tag: str | None = None,
                   text: str | None = None, dtype: str | None = None, device: DeviceLike = None,
                   traits: Iterable[str] = ()) -> str:
        """Why a listing is empty: an HLSL attention session's list was `[]`, with nothing to tell the agent that
        the catalog's attention texts were all written for CUDA and HIP. Where the backend has texts for the
        problem and a tag, text, dtype or device filter left none, that filter is named, not the backend."""
        if not (backend and problem):
            return "no text matches these filters"
        traits = tuple(traits)
        own = self.list(backend=backend, problem=problem, traits=traits)
        if own:
            filters: dict[str, dict[str, Any]] = {f"tag={tag!r}": {"tag": tag}, f"text={text!r}": {"text": text},
                                                  f"dtype={dtype}": {"dtype": dtype}, "this device": {"device": device}}
            active = [name for name, kw in filters.items() if next(iter(kw.values())) is not None]
            alone = [name for name in active
                     if not self.list(backend=backend, problem=problem, traits=traits, **filters[name])]
            return (f"the catalog has {len(own)} {problem} text(s) for {backend}, none matching "
                    f"{' and '.join(alone or active) or 'these filters'}")
        elsewhere = [t for t in self.list(problem=problem, tag=tag, text=text, traits=traits)
                     if backend.lower() not in t.backends and not t.for_any_problem]
        if not elsewhere:
            kind = f" (traits {', '.join(traits)})" if traits else " (it has no traits)"
            return (f"the catalog has no {problem} text{kind} for {backend}, nor for another backend; the texts for "
                    "any problem are all that apply")
        named = ", ".join(f"{t.id} ({', '.join(t.backends)})" for t in elsewhere[:6])
        return (f"no {problem} text is written for {backend}; the catalog's {problem} texts for other backends: "
                f"{named}. Their ideas may still carry over: read one with get_transformation, rewrite the kernel "
                "yourself and submit_kernel it with transformation set to that id")

    def resolve(self, id: str, backend: str | None,
                device: DeviceLike = None,
                dtype: str | None = None) -> Transformation:
        """The most specific text for `id` on (backend, device, dtype): a matching transformation that extends it
        (device-specific over backend-specific over portable, following chains), else `id` itself."""
        current = self.get(id)
        dev = DeviceDescriptor.of(device)
        seen = {current.id}
        while True:
            candidates = [t for t in self._items.values() if t.extends == current.id and t.id not in seen
                          and t.for_backend(backend) and t.for_device(dev) and t.for_dtype(dtype)]
            if not candidates:
                return current
            current = min(candidates, key=_specificity)
            seen.add(current.id)

    def resolve_for_session(self, id: str, backend: str, dtype: str,
                            device: DeviceLike = None, *, exact: bool = False,
                            problem: str | None = None, traits: Iterable[str] = ()) -> Transformation:
        """`resolve` (with `exact`, `id`'s own text), refusing a text that does not cover the session: a CUDA text
        for an HLSL session, an f16 text for an f32 one, a matmul text for a softmax one. The refusal names the texts
        that do apply and share a tag, so the agent can pick one."""
        found = self.get(id) if exact else self.resolve(id, backend, device, dtype)
        traits = tuple(traits)
        wrong = []
        if problem and not found.for_problem(problem, traits):
            has = f"traits {', '.join(traits)}" if traits else "no traits"
            wrong.append(f"is written for {found.scope()}, not {problem} ({has})")
        if not found.for_backend(backend):
            wrong.append(f"is written for {', '.join(found.backends)}, not {backend}")
        if not found.for_dtype(dtype):
            wrong.append(f"applies to {', '.join(found.dtypes)} sessions, not {dtype}")
        if not wrong:
            return found
        named = found.id if found.id == id else f"{id} (resolved to {found.id})"
        dev = DeviceDescriptor.of(device)
        tags = set(found.tags)
        near = sorted((t for t in self._items.values() if t.id != found.id and t.for_backend(backend)
                       and t.for_dtype(dtype) and t.for_device(dev) and tags & set(t.tags)
                       and (not problem or t.for_problem(problem, traits))),
                      key=lambda t: (-len(tags & set(t.tags)), t.id))[:4]
        hint = (f"for a {backend} {dtype} session try {', '.join(t.id for t in near)}; "
                "list_transformations(session_id=...) shows what applies." if near else
                # Not "see list_transformations": for an HLSL attention session it was empty.
                f"no catalog text of its kind covers this session; its idea may still carry over: read it with "
                f"get_transformation, rewrite the kernel yourself and submit_kernel it with "
                f"transformation={found.id!r}.")
        raise InvalidInput(f"transformation {named} {' and '.join(wrong)}, and has no specialization for this "
                           "session", hint)

    def specialization_note(self, asked: str, resolved: str, backend: str, device: DeviceLike = None) -> str | None:
        """One line when `asked` resolved to another text: which one, what it is specialized for, and how to get
        the text asked for."""
        if asked == resolved:
            return None
        variant, dev = self.get(resolved), DeviceDescriptor.of(device)
        where = backend
        if variant.devices and dev is not None:
            named = dev.family or dev.arch or dev.name
            where = f"{named} ({dev.arch})" if dev.family and dev.arch else named
        return f"resolved to {resolved}, the {where} specialization of {asked}; pass exact=true for {asked} itself"


def _specificity(t: Transformation) -> tuple[int, int, int, int, str]:
    # Smaller sorts first: device-specific, then fewer devices, then fewer backends, then the user's, then id.
    return (0 if t.devices else 1, len(t.devices), len(t.backends), 0 if not t.builtin else 1, t.id)


def _drop_bad_links(items: dict[str, Transformation]) -> list[CatalogError]:
    """`extends` must name a loaded id without a cycle (else the file is dropped); unknown `after` ids warn."""
    findings: list[CatalogError] = []
    changed = True
    while changed:  # dropping one file can orphan another that extends it
        changed = False
        for t in list(items.values()):
            if t.extends is None:
                continue
            if t.extends not in items:
                findings.append(CatalogError(file=str(t.source), field="extends",
                                             message=f"extends unknown id {t.extends!r}; this file is ignored"))
                del items[t.id]
                changed = True
                continue
            chain, cursor = [t.id], items[t.extends]
            while cursor.extends is not None and cursor.id not in chain and cursor.extends in items:
                chain.append(cursor.id)
                cursor = items[cursor.extends]
            if cursor.id in chain:
                findings.append(CatalogError(file=str(t.source), field="extends",
                                             message=f"extends forms a cycle ({' -> '.join([*chain, cursor.id])}); "
                                                     "this file is ignored"))
                del items[t.id]
                changed = True
    for t in items.values():
        unknown = [a for a in t.after if a not in items]
        if unknown:
            findings.append(CatalogError(file=str(t.source), field="after", level="warning",
                                         message=f"names unknown id(s) {', '.join(unknown)}"))
    return findings
