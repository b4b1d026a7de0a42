"""EPUB: a zip container -> :class:`Book`.

:class:`_Epub` reads members through ``zipfile`` without extracting anything, with the
defences: member names and hrefs that are absolute or escape the archive (``UnsafePathError``),
too many members (:data:`MAX_ZIP_MEMBERS`), more than :data:`MAX_UNCOMPRESSED_BYTES`
uncompressed (zip bomb), encrypted members and DRM (``rights.xml``, ``encryption.xml`` listing
content). All XML goes through :mod:`defusedxml` with entity declarations and external
references refused (HTML named entities are turned into character references first); content
documents that are not well-formed XML fall back to the HTML parser of ``jobs.ingest.html``.

:func:`_load_epub` follows ``container.xml`` -> OPF -> spine, reads titles from the EPUB 3 nav
or the EPUB 2 NCX, skips documents the guide/landmarks mark as front/back matter, turns each
spine document into blocks with ``jobs.ingest.html`` and cuts the block stream into chapters at
the TOC entries (or at h1/h2 without a usable TOC).

Does not know how XHTML elements become text (``jobs.ingest.html``), nor the chapter-title
rules of plain text; front/back matter chapters are dropped later by ``jobs.ingest.matter``.
"""

from __future__ import annotations

import codecs
import html
import html.entities
import posixpath
import re
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote
from xml.etree import ElementTree as ET

import defusedxml
from defusedxml import ElementTree as SafeET

from core.errors import InputError, UnsafePathError
from jobs.ingest.book import Book, Chapter
from jobs.ingest.matter import _COPYRIGHT_RE, _producer_notes
from jobs.ingest.outline import (_BY_RE, _KEYWORD_START_RE, _imprint_line, _numeral, _run_on_lines, _shouted,
                                 epub_checks, passages_short, title_case)
from jobs.ingest.common import (_CAST_LABEL_RE, _CONTENTS_LABEL_RE, _DEDICATION_LINE_RE, _has_prose, _join_title, _norm,
                                _show, _tokens)
from jobs.ingest.html import _MATTER_TYPES, _SCHEME_RE, _attr_tokens, _Block, _Extractor, _local, _parse_html
from jobs.ingest.text import _ORDINAL_HEADING_RE, _PG_END_RE, _PG_START_RE, _SECTION_RE


# --------------------------------------------------------------------------- limits


MAX_ZIP_MEMBERS = 20_000
"""Most members an EPUB may list."""


MAX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
"""Most uncompressed bytes read from one EPUB (a zip bomb is refused); re-exported by :mod:`jobs.ingest`."""


def _byte_cap() -> int:
    """The zip-bomb cap in force, looked up when it is used (a test lowers it)."""
    return MAX_UNCOMPRESSED_BYTES


# --------------------------------------------------------------------------- XML without entities


_XML_PREDEFINED = {"amp", "lt", "gt", "quot", "apos"}
_NAMED_ENTITY_RE = re.compile(rb"&([A-Za-z][A-Za-z0-9]{1,31});")


def _named_to_numeric(data: bytes) -> bytes:
    """``&nbsp;`` -> ``&#160;`` (HTML names are not declared in an XHTML file without its DTD)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data

    def sub(m: re.Match) -> bytes:
        name = m.group(1).decode("ascii")
        if name in _XML_PREDEFINED:
            return m.group(0)
        cp = html.entities.name2codepoint.get(name)
        return b"&#%d;" % cp if cp is not None else m.group(0)

    return _NAMED_ENTITY_RE.sub(sub, data)


# --------------------------------------------------------------------------- the archive


class _Epub:
    """Reads one EPUB through ``zipfile`` without extracting anything."""

    def __init__(self, p: Path, zf: zipfile.ZipFile) -> None:
        self.p = p
        self.where = _show(p)
        self.zf = zf
        self.read_bytes = 0
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise InputError(f"{self.where} has {len(infos)} files inside; that is not a book (limit "
                             f"{MAX_ZIP_MEMBERS}): re-export it")
        self.infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            self._check_member_name(info.filename)
            self.infos.setdefault(info.filename, info)
        self.folded = {n.casefold(): n for n in self.infos}

    # -- safety

    def _check_member_name(self, name: str) -> None:
        n = name.replace("\\", "/")
        norm = posixpath.normpath(n) if n else n
        if n.startswith("/") or re.match(r"^[A-Za-z]:", n) or norm == ".." or norm.startswith("../") or "\x00" in n:
            raise UnsafePathError(f"{self.where} contains an unsafe file name {name!r} (absolute or escaping the "
                                  f"archive with '..'); refusing this EPUB: re-download or re-export it")

    def resolve(self, base: str, href: str, what: str) -> str | None:
        """A member path for ``href`` relative to the folder ``base``; None for remote (http) links."""
        href = href.strip()
        if not href:
            return None
        if _SCHEME_RE.match(href) and not re.match(r"^[A-Za-z]:[\\/]", href):
            if href.lower().startswith("file:"):
                raise UnsafePathError(f"{self.where}: {what} points outside the archive ({href!r}); "
                                      f"refusing this EPUB: re-download or re-export it")
            return None
        path = unquote(href.split("#", 1)[0].split("?", 1)[0]).replace("\\", "/")
        if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
            raise UnsafePathError(f"{self.where}: {what} is an absolute path ({href!r}); "
                                  f"refusing this EPUB: re-download or re-export it")
        joined = posixpath.normpath(posixpath.join(base, path)) if path else base
        if joined == ".." or joined.startswith("../"):
            raise UnsafePathError(f"{self.where}: {what} escapes the archive with '..' ({href!r}); "
                                  f"refusing this EPUB: re-download or re-export it")
        return "" if joined == "." else joined

    # -- reading

    def member(self, name: str) -> str | None:
        if name in self.infos:
            return name
        return self.folded.get(name.casefold())

    def read(self, name: str, what: str) -> bytes:
        real = self.member(name)
        if real is None:
            raise InputError(f"{self.where} is not a valid EPUB: {what} {name!r} is missing; "
                             f"re-download or re-export it")
        info = self.infos[real]
        if info.flag_bits & 0x1:
            raise InputError(f"{self.where} is DRM-protected (its files are encrypted) and cannot be read; "
                             f"use a DRM-free copy of the book")
        left = _byte_cap() - self.read_bytes
        if info.file_size > left:
            self._bomb()
        try:
            with self.zf.open(info) as f:
                data = f.read(left + 1)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, RuntimeError,
                ValueError) as e:
            raise InputError(f"{self.where} is not a valid EPUB (corrupt zip: {_norm(str(e))}); "
                             f"re-download or re-export it") from None
        if len(data) > left:
            self._bomb()
        self.read_bytes += len(data)
        return data

    def _bomb(self) -> None:
        raise InputError(f"{self.where} unpacks to more than {_byte_cap() // (1024 * 1024)} MB "
                         f"(a zip bomb or not a book); refusing it")

    def xml(self, name: str, what: str, html_fallback: bool = False) -> ET.Element:
        data = self.read(name, what)
        try:
            return SafeET.fromstring(_named_to_numeric(data), forbid_dtd=False, forbid_entities=True,
                                     forbid_external=True)
        except defusedxml.DefusedXmlException:
            raise InputError(f"{self.where}: {name} declares XML entities or external references (a DTD with "
                             f"<!ENTITY>), which are refused for safety; re-export the EPUB without them") from None
        except (ET.ParseError, ValueError, LookupError) as e:
            if html_fallback:
                return _parse_html(data)
            raise InputError(f"{self.where} is not a valid EPUB: {name} is not well-formed XML "
                             f"({_norm(str(e))}); re-download or re-export it") from None


_CONTENT_EXTS = (".xhtml", ".html", ".htm", ".xml", ".opf", ".ncx", ".txt")
_HTML_TYPES = {"application/xhtml+xml", "text/html", "text/x-oeb1-document", "application/xml"}


def _check_drm(ep: _Epub, content_docs: set[str] | None = None) -> None:
    if ep.member("META-INF/rights.xml"):
        raise InputError(f"{ep.where} is DRM-protected (it has META-INF/rights.xml) and cannot be read; "
                         f"use a DRM-free copy of the book")
    if not ep.member("META-INF/encryption.xml"):
        return
    root = ep.xml("META-INF/encryption.xml", "encryption file")
    for data in root.iter():
        if _local(data.tag) != "encrypteddata":
            continue
        for ref in data.iter():
            if _local(ref.tag) != "cipherreference":
                continue
            uri = unquote(ref.get("URI", "")).replace("\\", "/").lstrip("/")
            target = posixpath.normpath(uri) if uri else ""
            is_content = target.lower().endswith(_CONTENT_EXTS) or (content_docs is not None and target in content_docs)
            if is_content:
                raise InputError(f"{ep.where} is DRM-protected (META-INF/encryption.xml lists encrypted content "
                                 f"such as {uri!r}) and cannot be read; use a DRM-free copy of the book")


# --------------------------------------------------------------------------- table of contents: nav, NCX


@dataclass
class _TocEntry:
    label: str
    doc: str
    frag: str
    depth: int


def _nav_entries(ep: _Epub, path: str) -> list[_TocEntry]:
    root = ep.xml(path, "navigation document", html_fallback=True)
    navs = [e for e in root.iter() if _local(e.tag) == "nav"]
    nav = next((n for n in navs if "toc" in _attr_tokens(n, "type") or "doc-toc" in _attr_tokens(n, "role")),
               navs[0] if navs else None)
    if nav is None:
        return []
    base = posixpath.dirname(path)
    out: list[_TocEntry] = []

    def walk(lst: ET.Element, depth: int) -> None:
        for li in lst:
            if _local(li.tag) != "li":
                continue
            label_el = next((c for c in li if _local(c.tag) in ("a", "span")), None)
            if label_el is not None and label_el.get("href"):
                href = label_el.get("href", "")
                doc = ep.resolve(base, href, "a table-of-contents link")
                if doc is not None:
                    out.append(_TocEntry(_norm("".join(label_el.itertext())), doc,
                                         unquote(href.split("#", 1)[1]) if "#" in href else "", depth))
            for sub in li:
                if _local(sub.tag) in ("ol", "ul") and sub.get("hidden") is None:
                    walk(sub, depth + 1)  # a hidden branch (EPUB 3 nav) lists a chapter's parts: no chapters

    lst = next((e for e in nav.iter() if _local(e.tag) in ("ol", "ul")), None)
    if lst is not None:
        walk(lst, 1)
    return out


def _ncx_entries(ep: _Epub, path: str) -> list[_TocEntry]:
    root = ep.xml(path, "NCX table of contents")
    navmap = next((e for e in root.iter() if _local(e.tag) == "navmap"), None)
    if navmap is None:
        return []
    base = posixpath.dirname(path)
    out: list[_TocEntry] = []

    def walk(el: ET.Element, depth: int) -> None:
        for point in el:
            if _local(point.tag) != "navpoint":
                continue
            label = ""
            src = ""
            for c in point:
                t = _local(c.tag)
                if t == "navlabel":
                    label = _norm(" ".join(x.text or "" for x in c.iter() if _local(x.tag) == "text"))
                elif t == "content":
                    src = c.get("src", "")
            if src:
                doc = ep.resolve(base, src, "an NCX entry")
                if doc is not None:
                    out.append(_TocEntry(label, doc, unquote(src.split("#", 1)[1]) if "#" in src else "", depth))
            walk(point, depth + 1)

    walk(navmap, 1)
    return out


# --------------------------------------------------------------------------- container -> package -> book


def _load_epub(p: Path, footnotes: str = "skip", front_matter: bool = False) -> Book:
    where = _show(p)
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, ValueError,
            NotImplementedError):
        raise InputError(f"{where} is not a valid EPUB (corrupt zip); re-download or re-export it") from None
    with zf:
        ep = _Epub(p, zf)
        _check_drm(ep)
        container = ep.xml("META-INF/container.xml", "container file")
        rootfiles = [e for e in container.iter() if _local(e.tag) == "rootfile" and e.get("full-path")]
        rootfiles.sort(key=lambda e: e.get("media-type") != "application/oebps-package+xml")
        if not rootfiles:
            raise InputError(f"{where} is not a valid EPUB: META-INF/container.xml names no package (OPF) file; "
                             f"re-download or re-export it")
        opf_path = ep.resolve("", rootfiles[0].get("full-path", ""), "the package file path")
        if not opf_path:
            raise InputError(f"{where} is not a valid EPUB: its package file path is not usable; re-export it")
        opf = ep.xml(opf_path, "package file")
        return _read_package(ep, p, opf_path, opf, footnotes, front_matter)


def _matter_docs(ep: _Epub, opf: ET.Element, base: str, nav: str | None) -> set[str]:
    """Documents the OPF guide or the nav's landmarks mark as front/back matter (whole documents)."""
    out: set[str] = set()
    links: list[tuple[set[str], str, str]] = []
    for e in opf.iter():
        if _local(e.tag) == "reference" and e.get("href"):
            links.append(({(e.get("type") or "").strip().lower()}, e.get("href", ""), base))
    if nav:
        try:
            root = ep.xml(nav, "navigation document", html_fallback=True)
        except InputError:
            root = None
        for n in (root.iter() if root is not None else ()):
            if _local(n.tag) == "nav" and "landmarks" in _attr_tokens(n, "type"):
                for a in n.iter():
                    if _local(a.tag) == "a" and a.get("href"):
                        links.append((_attr_tokens(a, "type"), a.get("href", ""), posixpath.dirname(nav)))
    for types, href, b in links:
        if types & _MATTER_TYPES and "#" not in href.strip("#"):
            doc = ep.resolve(b, href.split("#", 1)[0], "a landmark link")
            if doc:
                out.add(doc)
    return out


def _unlisted_chapters(starts: list[tuple[int, str, int]], stream: list[_Block],
                       unlisted: list[int | None]) -> list[tuple[int, str, int]]:
    """A document of the spine that no contents entry points to, between two chapters the contents names,
    that opens with a heading at the level most of those chapters' headings have (an <h2> "BY THE RIVER"
    left out of the NCX between "SANSARA" and "THE FERRYMAN"), is a chapter the contents left out."""
    heads = [(stream[s].level, depth) for s, _label, depth in starts if s < len(stream) and stream[s].level]
    if len(heads) < 3 or not unlisted:
        return starts
    level, depth = Counter(heads).most_common(1)[0][0]
    if 2 * sum(1 for lv, _d in heads if lv == level) < len(starts):
        return starts
    taken = {s for s, _label, _depth in starts}
    added = [(s, stream[s].text, depth) for s in unlisted
             if s is not None and starts[0][0] < s < starts[-1][0] and s not in taken and s < len(stream)
             and stream[s].level == level]
    return sorted(starts + added, key=lambda t: t[0]) if added else starts


def _read_package(ep: _Epub, p: Path, opf_path: str, opf: ET.Element, footnotes: str = "skip",
                  front_matter: bool = False) -> Book:
    where = ep.where
    base = posixpath.dirname(opf_path)
    title = ""
    for e in opf.iter():
        if _local(e.tag) == "title" and (e.text or "").strip():
            title = _subtitle_colon(_norm("".join(e.itertext())))
            break
    author = _authors(opf)
    manifest: dict[str, tuple[str, str, set[str]]] = {}
    for e in opf.iter():
        if _local(e.tag) == "item" and e.get("id") and e.get("href") is not None:
            path = ep.resolve(base, e.get("href", ""), f"manifest item {e.get('id')!r}")
            if path:
                manifest[e.get("id", "")] = (path, (e.get("media-type") or "").lower(),
                                             set((e.get("properties") or "").split()))
    spine_el = next((e for e in opf.iter() if _local(e.tag) == "spine"), None)
    spine: list[tuple[str, bool]] = []
    if spine_el is not None:
        for ref in spine_el:
            if _local(ref.tag) == "itemref" and ref.get("idref") in manifest:
                path, mt, _props = manifest[ref.get("idref", "")]
                if mt in _HTML_TYPES or path.lower().endswith((".xhtml", ".html", ".htm")):
                    spine.append((path, ref.get("linear", "yes").strip().lower() != "no"))
    if not spine:
        raise InputError(f"{where} is not a valid EPUB: its package file lists no readable documents in the "
                         f"spine; re-download or re-export it")
    _check_drm(ep, {path for path, _ in spine} | {m[0] for m in manifest.values() if m[1] in _HTML_TYPES})

    toc: list[_TocEntry] = []
    nav = next((m[0] for m in manifest.values() if "nav" in m[2]), None)
    if nav:
        toc = _nav_entries(ep, nav)
    if not toc:
        ncx_id = spine_el.get("toc") if spine_el is not None else None
        ncx = manifest.get(ncx_id or "", (None,))[0] or next(
            (m[0] for m in manifest.values() if m[1] == "application/x-dtbncx+xml"), None)
        if ncx and ep.member(ncx):
            toc = _ncx_entries(ep, ncx)
    toc_docs = {e.doc for e in toc}
    matter_docs = set() if front_matter else _matter_docs(ep, opf, base, nav)

    # read the spine into one stream of blocks
    stream: list[_Block] = []
    anchors: dict[str, int] = {}
    doc_start: dict[str, int] = {}
    doc_order: list[str] = []
    skipped: set[str] = set()
    for path, linear in spine:
        if path in doc_start or (not linear and path not in toc_docs) or path in matter_docs:
            continue
        root = ep.xml(path, "content document", html_fallback=True)
        ex = _Extractor(footnotes, front_matter, {e.frag for e in toc if e.doc == path and e.frag}).run(root)
        doc_start[path] = len(stream)
        doc_order.append(path)
        for k, v in ex.anchors.items():
            anchors[f"{path}#{k}"] = len(stream) + v
        skipped |= {f"{path}#{k}" for k in ex.skipped_ids}
        stream.extend(ex.blocks)

    # Project Gutenberg START/END markers written as text
    lo, hi = 0, len(stream)
    for k, b in enumerate(stream):
        if _PG_START_RE.match(b.text):
            lo = k + 1
            break
    for k in range(lo, len(stream)):
        if _PG_END_RE.match(stream[k].text):
            hi = k
            break
    stream = stream[lo:hi]

    def shift(pos: int) -> int | None:
        """A position in the cut stream; None past its end."""
        return None if pos >= hi else max(pos, lo) - lo

    # chapter starts: (position, title, depth)
    starts: list[tuple[int, str, int]] = []
    for e in toc:
        key = f"{e.doc}#{e.frag}" if e.frag else None
        if key and key in skipped:
            continue  # points into Project Gutenberg boilerplate
        if _BY_RE.match(e.label):
            continue  # a title page's "Illustrated by ..." / "Translated by ..." line: no chapter
        if _producer_notes([e.label], front=True):
            continue  # a note by the e-text's maker ("[This text is taken from the New York edition of 1919.]")
        if key and key in anchors:
            pos = anchors[key]
        elif e.doc in doc_start:
            pos = doc_start[e.doc]
        else:
            continue
        s = shift(pos)
        if s is not None:
            starts.append((s, e.label, e.depth))
    if not starts:
        # no usable TOC: each document with an h1/h2 starts a chapter titled by it
        bounds = [doc_start[d] for d in doc_order] + [lo + len(stream) if hi == lo + len(stream) else hi]
        for a, b in zip(bounds, bounds[1:]):
            s = shift(a)
            if s is None:
                continue
            heading = next((blk for blk in stream[s:max(s, min(b, hi) - lo)] if 1 <= blk.level <= 2), None)
            if heading is not None:
                starts.append((s, heading.text, 1))
    starts.sort(key=lambda t: t[0])
    starts = _unlisted_chapters(starts, stream, [shift(doc_start[d]) for d in doc_order if d not in toc_docs])

    book_title = title or p.stem
    segments: list[tuple[str | None, int, list[_Block]]] = []
    first = starts[0][0] if starts else len(stream)
    segments.append((None, 0, stream[:first]))
    for k, (pos, label, depth) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(stream)
        segments.append((label, depth, stream[pos:end]))

    _front_title, paras0 = _segment_paragraphs(None, segments[0][2])
    paras0 = [q for q in paras0 if not _CATALOGUE_SUMMARY_RE.match(q)]
    merged: list[tuple[str, int, list[str], list[str]]] = [(title, 0, paras0, ["text"] * len(paras0))] if paras0 else []
    entries = [(label, depth) for label, depth, _blocks in segments]
    parts = _restarting_parts(entries)
    sizes = [sum(len(b.text.split()) for b in blocks) for _l, _d, blocks in segments]
    pieces = _nested_parts(entries, sizes)
    passages = _numbered_passages(entries, sizes)
    inserts = _between_numbers(entries)
    # empty entries: a parent ("Part One") lends its label to its first child; others are dropped
    pending: list[tuple[str, int]] = []
    host: int | None = None  # the depth of a numbered chapter's entry, whose nested entries are its sections
    numbered = False  # the last chapter is a numbered one: sentences marked up as headings after it are its text
    texted = False  # an entry with text of its own has been read
    title_page = False  # the nav's entry for the book's title came before any text: its title page's lines follow
    title_at = 0  # how far into the book's title the entries that print it in pieces have gone ("THE LIFE", "OF" ...)
    cast_at: int | None = None  # the depth of a play's cast list just passed over, under its title's entry
    listed = _paged_entries(entries)
    carried: list[str] = []  # a group's short lines, read at the start of its first chapter
    for n, (label, depth, blocks) in enumerate(segments[1:], 1):
        if n in listed:
            continue  # an analytical contents' entry, "IS LIFE WORTH LIVING 32" over its summary: not read
        t, paras = _segment_paragraphs(label, blocks)
        group = texted and _group_lines(t, paras, n, segments, listed)
        paras, carried = carried + paras, []
        if group:
            # a narrative's or period's entry over its teller's line ("FIRST NARRATIVE." / "Contributed by Miss
            # Clack ..."), right over its "CHAPTER I": it heads that chapter (as a parent's entry would), its
            # lines read at its start
            carried = paras
            _keep_dedications(pending, depth, merged)
            pending = [(pt, pd) for pt, pd in pending if pd < depth] + [(t, depth - 1)]
            continue
        if not texted:
            paras = [q for q in paras if not _CATALOGUE_SUMMARY_RE.match(q)]
            # before the book's first text, entries for the title page's lines (its title, a subtitle under
            # it, an edition line, the publisher's imprint) title nothing: "THROUGH THE LOOKING-GLASS" / "And What Alice Found There"
            piece = _title_piece(t, book_title, title_at)
            if piece is not None:
                title_at = piece
            # (after pieces of the title, a long entry is the title page's credit lines: "Fellow Of The Royal,
            # Geological, Linnæan, Etc., Societies; Author Of ... LONDON: JOHN MURRAY, ALBEMARLE STREET. 1859.")
            if _title_entry(t, book_title) or piece is not None or _EDITION_LINE_RE.match(t) or _BRACKETED_LINE_RE.match(t) \
                    or _AUTHOR_OF_RE.match(t) or not front_matter and _imprint_line(t) or (
                    title_page and not paras or title_at and len(t.split()) >= 12) \
                    and not _NUMBERED_ENTRY_RE.match(t) and not _KEYWORD_START_RE.match(t):
                title_page = title_page or _title_entry(t, book_title)
                if not paras:
                    if _dedication_entry(t):
                        merged.append(("", depth, [t], ["text"]))  # a dedication marked up as a heading: text
                    continue
                t = ""
        if host is not None and depth <= host:
            host = None
        if n in parts and (merged or pending):
            # a tale's numbered part: a "Part II." heading inside the tale, whose entry may have no text of its own
            if pending:
                merged.append((_chain_titles([pt for pt, _pd in pending if pt]), depth, [], []))
                pending = []
            pt, pd, ps, ks = merged[-1]
            merged[-1] = (pt, pd, ps + [f"Part {t.strip().rstrip('.')}."] + paras,
                          ks + ["heading"] + ["text"] * len(paras))
            numbered = texted = True
            continue
        if (n in pieces or n in passages) and (merged or pending):
            # a poem's or tale's numbered part listed under its entry (and a titled piece beside them: "ARGUMENT."),
            # or a numbered fragment under its section's entry
            if pending:
                merged.append((_chain_titles([pt for pt, _pd in pending if pt]), depth, [], []))
                pending = []
            pt, pd, ps, ks = merged[-1]
            head = f"{t.strip().rstrip('.')}." if n in passages else \
                f"Part {t.strip().rstrip('.')}." if _bare_number(t) is not None else _spoken(t)
            merged[-1] = (pt, pd, ps + [head] + paras, ks + ["heading"] + ["text"] * len(paras))
            texted = True
            continue
        if n in inserts and merged and not pending:
            pt, pd, ps, ks = merged[-1]
            merged[-1] = (pt, pd, ps + [_spoken(t)] + paras, ks + ["heading"] + ["text"] * len(paras))
            continue
        if (host is not None and _nested_section(t)) or (numbered and merged and _sentence_entry(t)):
            if pending:  # the chapter's entry has no text of its own before its first section
                merged.append((_chain_titles([pt for pt, _pd in pending if pt]), host, [], []))
                pending = []
            pt, pd, ps, ks = merged[-1]
            merged[-1] = (pt, pd, ps + [_spoken(t)] + paras, ks + ["heading"] + ["text"] * len(paras))
            continue
        # a numbered chapter's entry holds sections, except one lone entry under a number with no text of
        # its own, which is the chapter's title ("Chapter 1" / "The Old Sea-dog at the Inn")
        inner = next((m for m in range(n + 1, len(segments)) if segments[m][1] <= depth), len(segments)) - n - 1
        if _NUMBERED_ENTRY_RE.match(t) and (inner >= 2 or paras and inner):
            host = depth
        if paras and pending and (_CAST_LABEL_RE.match(t.strip()) or _CAST_LABEL_AFTER_RE.search(t)) \
                and all(len(q.split()) <= 16 for q in paras):
            cast_at = depth  # a play's cast list under its title's entry ("CHARACTERS"): the playbill, not read
            continue
        if not paras:
            # an entry without text lends its label to the next ("Part One"), a contents label excepted: its
            # list is not read, and "Contents. Foreword" is no title
            _keep_dedications(pending, depth, merged)
            pending = [(pt, pd) for pt, pd in pending if pd < depth or pd == depth and _ACT_ENTRY_RE.match(pt.strip())] + \
                ([] if _CONTENTS_LABEL_RE.match(t.strip()) else [(t, depth)])
            continue
        # a parent entry naming the book (a half-title over the chapters) lends no label: the announcement said it
        _keep_dedications(pending, depth, merged)
        # (an act's entry at its scene's level, "ACT I" over "SCENE I--A pass of rocks ...", is said with it)
        heads = [pt for pt, pd in pending if (pd < depth or pd == depth and _ACT_ENTRY_RE.match(pt.strip()))
                 and pt and not _title_entry(pt, book_title)]
        if cast_at == depth and heads:
            # the play's title again after its cast list ("THE CHESTER PAGEANT OF THE DELUGE" under "THE CHESTER
            # PAGEANT OF THE WATER-LEADERS ... NOAH'S DELUGE"): the play is titled by its entry, said once
            merged.append((_chain_titles(heads), depth, paras, ["text"] * len(paras)))
        else:
            merged.append((_chain_titles(heads + [t]), depth, paras, ["text"] * len(paras)))
        cast_at = None
        texted = True
        numbered = bool(_NUMBERED_ENTRY_RE.match(t))
        pending = []
    # a work's own title page inside the book (its entry holds only its "by ..." line) opens the work's first
    # chapter, whose title it leads, as a part's does ("JOHN MCCRAE. An Essay in Character. I. In Flanders Fields")
    for k in range(len(merged) - 2, 0, -1):
        t, d, ps, ks = merged[k]
        if ps and all(_BY_RE.match(q) and len(q.split()) <= 12 for q in ps):
            nt, nd, nps, nks = merged[k + 1]
            merged[k + 1] = (_chain_titles([t, nt]), nd, ps + nps, ks + nks)
            del merged[k]
    # notes by the e-text's makers ("The images in this file ...") are not the book's text
    kept = [[i not in _producer_notes(ps, front=j < 3) for i in range(len(ps))]
            for j, (_t, _d, ps, _k) in enumerate(merged)]
    merged = [(t, d, [q for q, ok in zip(ps, keep) if ok], [kd for kd, ok in zip(ks, keep) if ok])
              for (t, d, ps, ks), keep in zip(merged, kept)]
    merged = [m for m in merged if "text" in m[3]]
    if not front_matter:
        # the title page's imprint among the untitled pages before the first titled entry, with prose after it
        # ("LONDON: Printed for and sold by the Author, No. 10, Union-Street ..." between an epigraph and a
        # dedicatory letter): not read (an imprint last on its page is the title page's, see epub_checks; a
        # copyright notice stays: it marks a copyright page, which jobs.ingest.matter leaves out whole)
        for j, (t, d, ps, ks) in enumerate(merged):
            if t and t != title:  # (the text before the first entry is filed under the book's title)
                break
            drop = [ks[i] == "text" and len(q.split()) <= 40 and _imprint_line(q) and not _COPYRIGHT_RE.search(q)
                    and any(_has_prose([x]) for x in ps[i + 1:]) for i, q in enumerate(ps)]
            keep = [i for i, d in enumerate(_run_on_lines(ps, drop)) if not d]
            merged[j] = (t, d, [ps[i] for i in keep], [ks[i] for i in keep])
        merged = [m for m in merged if "text" in m[3]]
    # leading front matter without prose (title page, contents, edition notice; an imprint or copyright entry in
    # sentences is no prose of the book unless front matter is kept) is left out
    k, kept_dedications = 0, []
    while k < len(merged) - 1 and not _has_prose([q for q in merged[k][2] if front_matter or not _imprint_line(q)]) \
            and any(_has_prose(c[2]) for c in merged[k + 1:]):
        if not merged[k][0] and merged[k][2] and all(_DEDICATION_LINE_RE.match(q) for q in merged[k][2]):
            kept_dedications.append(merged[k])  # a dedication marked up as a heading: spoken, though no prose
        k += 1
    merged = kept_dedications + merged[k:]
    if not merged:
        raise InputError(f"{where} has no readable text in its documents; pass a book with text")
    return Book(title=book_title, source=p, format="epub",
                chapters=epub_checks([Chapter(i + 1, t, ps, None if "heading" not in ks else ks)
                                      for i, (t, _d, ps, ks) in enumerate(merged)], title, author, front_matter),
                author=author,
                title_known=bool(title))


# --------------------------------------------------------------------------- blocks -> chapters


_ACT_ENTRY_RE = re.compile(r"^(?i:act)\s+(?:[IVXLCDM]+|\d{1,2})\.?$")
"""A play's act entry with no title and no text of its own: "ACT I", "ACT III."."""
_NUMBERED_ENTRY_RE = re.compile(r"^(?:(?i:chapter|chap\.|letter|stave|canto)\s+(?:[IVXLCDM]+|\d{1,3})\b"
                                r"|(?:[IVXLCDM]+|\d{1,3})\.\s+\S)")
"""A nav entry for a numbered chapter ("II. ELEMENTARY RULES OF USAGE", "CHAPTER IV"), not a part."""
_BARE_ENTRY_RE = re.compile(r"^(?:[IVXLCDM]+|\d{1,3})\.?$")


def _authors(opf: ET.Element) -> str | None:
    """The package's authors in their order, joined as a title page names them ("William Wordsworth and Samuel
    Taylor Coleridge"): each ``dc:creator`` whose role is ``aut`` or not given, the role read from its
    ``opf:role`` attribute (EPUB 2) or from a ``<meta property="role" refines="#id">`` (EPUB 3); None when
    there is none."""
    roles = {(e.get("refines") or "").lstrip("#"): (e.text or "").strip()
             for e in opf.iter() if _local(e.tag) == "meta" and e.get("property") == "role" and e.get("refines")}
    names: list[str] = []
    for e in opf.iter():
        if _local(e.tag) != "creator" or not (e.text or "").strip():
            continue
        role = e.get("{http://www.idpf.org/2007/opf}role") or e.get("role") or roles.get(e.get("id") or "") or "aut"
        name = _norm("".join(e.itertext()))
        if role == "aut" and name not in names:
            names.append(name)
    if not names:
        return None
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _entry_number(label: str | None) -> int | None:
    """The number of a numbered entry ("CHAPTER IV", "II. ELEMENTARY RULES", "1 Sara", "XII"), else None; a
    roman numeral must stand alone or end with a full stop ("I Go to Bristol" is a title)."""
    m = _ENTRY_NUMBER_RE.match((label or "").strip())
    return _numeral(m.group("a") or m.group("b") or m.group("c")) if m else None


_ENTRY_NUMBER_RE = re.compile(r"^(?:(?i:chapter|letter|stave|canto)\s+(?P<a>[IVXLCDM]+|\d{1,3})\b"
                              r"|(?P<b>\d{1,3})(?:[.:]?\s+\S|\.?$)|(?P<c>[IVXLCDM]+)(?:\.\s+\S|\.?$))")


def _restarting_parts(entries: list[tuple[str | None, int]]) -> set[int]:
    """The entries that are a tale's numbered parts in a flat contents list: bare numerals counting from I
    ("I", "II", ... "XII") right after a titled entry at the same depth ("WHAT MEN LIVE BY"), when the count
    starts again at I after another titled entry ("HOW MUCH LAND DOES A MAN NEED?", "I" ... "IX"). One run
    of numerals after one titled entry (an unnumbered prologue, then chapters I-XXIV) is chapters, and so are
    numerals under a part's heading ("BOOK I", "PART TWO", "FIRST PART"): a part holds chapters."""
    runs: list[list[int]] = []
    n = 1
    while n < len(entries) - 1:
        label, depth = entries[n]
        nxt, nd = entries[n + 1]
        if not label or _BARE_ENTRY_RE.match(label.strip()) or _KEYWORD_START_RE.match(label.strip()) \
                or _ORDINAL_HEADING_RE.match(label.strip()) or nd != depth or _bare_number(nxt) != 1:
            n += 1
            continue
        run: list[int] = []
        m = n + 1
        while m < len(entries):
            lm, dm = entries[m]
            if dm > depth:  # an entry nested under a part is read by the part
                m += 1
            elif dm == depth and _bare_number(lm) == len(run) + 1:
                run.append(m)
                m += 1
            else:
                break
        if len(run) >= 2:
            runs.append(run)
        n = m
    return {m for run in runs for m in run} if len(runs) >= 2 else set()


NOVEL_CHAPTERS = 10
"""Numbered entries under one titled entry, at least, that with :data:`NOVEL_WORDS` make a novel's chapters."""
NOVEL_WORDS = 20000
"""Words under one titled entry's numbered entries, at least, that with :data:`NOVEL_CHAPTERS` make a novel."""


_FRAME_ENTRY_RE = re.compile(r"^(?:prologue|epilogue)\W*$", re.I)
"""A prologue's or epilogue's entry, which may hold numbered parts as a tale does ("PROLOGUE" over "I" ... "IV")."""
PIECE_WORDS = 300
"""Words at most of each short titled piece under a tale's entry."""
FIRST_PART_WORDS = 200
"""Words at least of a tale's own text before its parts numbered from II (its first part, unheaded)."""


def _nested_parts(entries: list[tuple[str | None, int]], words: list[int] | None = None) -> set[int]:
    """The entries that are the numbered parts of a poem or tale listed under its entry: an entry titled
    otherwise than by a number or keyword ("THE THORN.") whose entries one level down include bare numerals
    counting from I ("I." ... "XXII.", perhaps after a titled one: "ARGUMENT.", "I." ... "VII."). When two
    or more entries hold such runs, the entries under them are their sections, not chapters; one titled
    entry over numbered entries is a part or a novel over its chapters. So is a run of :data:`NOVEL_CHAPTERS`
    entries or more holding :data:`NOVEL_WORDS` words or more (``words``: each entry's) beside tales in numbered
    parts: "THE AWAKENING" over "I" ... "XXXIX", before "MA'AME PÉLAGIE" over "I" ... "IV". Where two tales or more
    are in numbered parts, so are a tale's parts numbered from II under an entry with text of its own (its first
    part unheaded, :data:`FIRST_PART_WORDS` words or more), and three short titled pieces or more under a tale's entry (:data:`PIECE_WORDS` words at
    most each: "THE PROPHETS' PARADISE" over "THE STUDIO", "THE PHANTOM" ...). A prologue or epilogue holds
    numbered parts as a tale does (:data:`_FRAME_ENTRY_RE`). Where no tale's parts are listed from "I", two tales
    or more whose parts are listed from "II" (one of them two numerals at least, another perhaps a lone "II") are
    tales in parts all the same: "THE QUEEN OF SPADES" over "II" ... "VI", "THE BET" over "II". A numeral marked up
    a level too high, at its tale's own level but going on with the count ("IV" under the tale, then "V" beside
    it), is one of the tale's parts."""
    found: list[list[int]] = []
    novels: list[list[int]] = []
    later: list[list[int]] = []
    from_two: list[list[int]] = []  # tales' parts listed from "II" (a lone "II" too), every tale's "I" unlisted
    for n, (label, depth) in enumerate(entries):
        if not label or _bare_number(label) is not None or _KEYWORD_START_RE.match(label.strip()) \
                and not _FRAME_ENTRY_RE.match(label.strip()) or _ORDINAL_HEADING_RE.match(label.strip()):
            continue
        inner = []
        slipped: set[int] = set()  # a part's numeral marked up a level too high ("V" among the tale's h3 numerals)
        last = None  # the number of the last numeral one level down
        for m in range(n + 1, len(entries)):
            lm, dm = entries[m]
            if dm <= depth:
                if dm == depth and last is not None and _bare_number(lm) == last + 1:
                    slipped.add(m)
                    inner.append(m)
                    last += 1
                    continue
                break
            inner.append(m)
            if dm == depth + 1:
                last = _bare_number(lm)
        children = [m for m in inner if entries[m][1] == depth + 1 or m in slipped]
        if len(children) != len(inner):
            continue
        numbers = [_bare_number(entries[m][0]) for m in children if _bare_number(entries[m][0]) is not None]
        if len(numbers) >= 2 and numbers == list(range(1, len(numbers) + 1)) \
                and len(children) - len(numbers) <= 1 and _bare_number(entries[children[-1]][0]) is not None:
            novel = words is not None and len(numbers) >= NOVEL_CHAPTERS and sum(words[m] for m in children) >= NOVEL_WORDS
            (novels if novel else found).append(children)
        elif words is not None and len(numbers) == len(children) >= 1 and numbers == list(range(2, len(numbers) + 2)) \
                and words[n] >= FIRST_PART_WORDS:
            # "THE STREET OF THE FIRST SHELL", its first part unheaded, over "II" ... "IV"
            if len(numbers) >= 2:
                later.append(children)
            from_two.append(children)
        elif words is not None and len(children) >= 3 and not numbers and all(
                words[m] <= PIECE_WORDS and not _KEYWORD_START_RE.match((entries[m][0] or "").strip()) for m in children):
            later.append(children)  # "THE PROPHETS' PARADISE" over eight short pieces: "THE STUDIO", "THE PHANTOM" ...
    if not found and not novels and len(from_two) >= 2 and max(map(len, from_two)) >= 2:
        return {m for run in from_two + later for m in run}  # every tale's "I" left out of the list
    if len(found) + len(novels) < 2 or not found:
        return set()
    return {m for run in found + (later if len(found) >= 2 else []) for m in run}


_PASSAGE_NUMBER_RE = re.compile(r"^\d{1,4}\.?$")


def _numbered_passages(entries: list[tuple[str | None, int]], words: list[int]) -> set[int]:
    """The entries that are numbered passages of a book of fragments or sayings, listed under their section's
    entry ("SECTION I" / "THOUGHTS ON MIND AND ON STYLE" / "1" ... "59", "SECTION II" / ... / "60" ...): entries
    titled by a number alone, nested under an entry of another kind, as many, under as many parents and as short
    (``words``: each entry's words) as :func:`~jobs.ingest.outline.passages_short` asks. They are read inside their section under
    their number, not as chapters of their own (a novel's bare-numbered chapters under its parts run to thousands
    of words)."""
    found: list[int] = []
    parents: set[int] = set()
    parent: int | None = None  # the last entry of another kind, and its depth
    for n, (label, depth) in enumerate(entries):
        if n == 0:
            continue
        if label and _PASSAGE_NUMBER_RE.match(label.strip()):
            if parent is not None and depth > entries[parent][1]:
                found.append(n)
                parents.add(parent)
            continue
        parent = n
    return set(found) if passages_short([words[n] for n in found], len(parents)) else set()


def _bare_number(label: str | None) -> int | None:
    return _numeral(label) if label and _BARE_ENTRY_RE.match(label.strip()) else None


def _between_numbers(entries: list[tuple[str | None, int]]) -> set[int]:
    """Entries set between two numbered chapters that follow each other ("1 Sara", "MISS MINCHIN, Select
    Seminary for Young Ladies.", "2 A French Lesson"), at their depth, with no number and no keyword of their
    own ("PART TWO", "INTERLUDE", "EPILOGUE" stay headings of their own): a line of the first chapter's text
    marked up as a heading (a door-plate, a notice), read inside that chapter under it, not a chapter."""
    out: set[int] = set()
    for n in range(2, len(entries) - 1):
        label, depth = entries[n]
        (prev, pd), (nxt, nd) = entries[n - 1], entries[n + 1]
        if not label or pd != depth or nd != depth or _entry_number(label) is not None \
                or _KEYWORD_START_RE.match(label) or _SECTION_RE.match(label):
            continue
        a, b = _entry_number(prev), _entry_number(nxt)
        if a is not None and b == a + 1:
            out.add(n)
    return out


_CATALOGUE_SUMMARY_RE = re.compile(r"^Summary:\s+\S")
"""A library catalogue's summary of the book printed on its title page ("Summary: Sara Crewe, a pupil at ...")."""


def _subtitle_colon(title: str) -> str:
    """A package title with its subtitle after a slash ("A Little Princess / Being the whole story of Sara Crewe
    ...") is announced with a colon, as a title page's subtitle line is: "A Little Princess: Being the whole ..."."""
    return re.sub(r"\s+/\s+", ": ", title, count=1)


def _nested_section(label: str) -> bool:
    """An entry nested under a numbered chapter's entry is one of its sections ("1. Form the possessive
    singular of nouns by adding 's.", "WORDS OFTEN MISSPELLED", "I. Punctuate:"), unless it is a bare
    numeral (a story's part: see ``epub_checks``) or a keyword heading of its own ("CHAPTER I", "PART II")."""
    label = label.strip()
    return bool(label) and not _BARE_ENTRY_RE.match(label) and not _KEYWORD_START_RE.match(label)


_BROKEN_OFF_RE = re.compile(r"(?:[,;:]|\b(?:of|and|the|a|an|in|to|or|for|with|from|on|by|at|that|which|as))"
                            r"[\"'\u201d\u2019]?$", re.I)


def _sentence_entry(label: str) -> bool:
    """An entry that is a sentence of the text marked up as a heading, not a title: two or more words that
    end with a colon, comma or semicolon or break off after a small word ("Three weeks later he writes:",
    "This phase of the war lasted two months precisely,", "... moving south to take its share in"), or a
    sentence closed by a full stop with two or more lower-case words of four letters or more ("With Ian
    Hamilton's column near Balmoral.", "At Lyndenburg:"); a keyword or numbered entry ("CHAPTER I", "I.
    Punctuate:") is none."""
    label = label.strip()
    words = label.split()
    if len(words) < 2 or _KEYWORD_START_RE.match(label) or _NUMBERED_ENTRY_RE.match(label) \
            or _BARE_ENTRY_RE.match(words[0]):
        return False
    if _BROKEN_OFF_RE.search(label):
        return True
    lower = sum(1 for w in words[1:] if w[:1].islower() and len(w.strip(".,")) >= 4)
    return len(words) >= 3 and label.endswith(".") and lower >= 2


def _spoken(label: str) -> str:
    return title_case(label) if _shouted(label) else label


_EDITION_LINE_RE = re.compile(r"^\W*(?:the\s+)?(?:[\w'\u2019-]+\s+){0,3}edition(?:\s+[\d.]+|,?\s+\d{4})?\W*$", re.I)
"""A title page's edition line: "The Millennium Fulcrum Edition 1.7", "Second Edition, 1902"."""
_AUTHOR_OF_RE = re.compile(r"^\W*(?:the\s+)?author\s+of\s+\S", re.I)
"""A title page's line crediting the author's other books: 'Author of "From Passion to Peace"'."""
_BRACKETED_LINE_RE = re.compile(r"^\s*\[[^\[\]]+\]\s*$")
"""A line wholly in square brackets ("[Canadian Poet, 1872-1918]"): before the book's first text, a title
page's descriptor or an editor's note, which titles no chapter."""


def _dedication_entry(label: str) -> bool:
    """A nav entry that is a dedication marked up as a heading ("To the Memory of John Stuart Mill ...")."""
    return len(label.split()) >= 4 and bool(_DEDICATION_LINE_RE.match(label.strip()))


def _keep_dedications(pending: list[tuple[str, int]], depth: int, merged: list) -> None:
    """A dedication marked up as a heading, with no text under it ("To the Memory of John Stuart Mill from whom I
    first learned ..."), and followed by an entry at its level, lends no title; it is text, spoken where it
    stands (an untitled piece that opens the next chapter, as a dedication before the first heading does)."""
    for pt, pd in pending:
        if pd >= depth and _dedication_entry(pt):
            merged.append(("", pd, [pt], ["text"]))


def _title_entry(label: str, title: str) -> bool:
    """A nav entry naming the book itself: its title, its main title ("SHE STOOPS TO CONQUER" for "She Stoops to
    Conquer; Or, The Mistakes of a Night: A Comedy") or the title with a subtitle after it."""
    lt, tt = _tokens(label), _tokens(title)
    if not lt or not tt:
        return False
    main = _tokens(re.split(r"[;:]|,\s+or\b", title, maxsplit=1, flags=re.I)[0])
    # a one-word main title counts where a subtitle follows it ("PRAGMATISM" for "Pragmatism: A New Name ...")
    return lt == tt or (len(tt) >= 2 and lt[:len(tt)] == tt) or (len(main) >= 2 or len(tt) > len(main)) and lt == main


_PAGED_LABEL_RE = re.compile(r"^\S.*\S\s+\d{1,4}$")
_PAGE_COLUMN_RE = re.compile(r"^pages?\.?$", re.I)


def _paged_entries(entries: list[tuple[str | None, int]]) -> set[int]:
    """Nav entries of a contents page set as headings: after an entry titled as the contents ("CONTENTS."), a
    run of three or more entries whose labels end with a page number ("THE WILL TO BELIEVE 1", "IS LIFE WORTH
    LIVING 32"), perhaps after a "PAGE" column label, and the contents' own entry. Their text is the chapters'
    summaries in the contents, not the chapters."""
    out: set[int] = set()
    for n, (label, _depth) in enumerate(entries):
        if not label or not _CONTENTS_LABEL_RE.match(label.strip()):
            continue
        m = n + 1
        while m < len(entries) and entries[m][0] and _PAGE_COLUMN_RE.match(entries[m][0].strip()):
            m += 1
        run = m
        while run < len(entries) and entries[run][0] and _PAGED_LABEL_RE.match(entries[run][0].strip()):
            run += 1
        if run - m >= 3:
            out.update(range(n, run))
    return out


GROUP_LINES_WORDS = 30
"""Words at most of a group's own lines under its entry, right over its first numbered chapter."""


def _group_lines(label: str, paras: list[str], n: int, segments: list, listed: set[int]) -> bool:
    """Entry ``n`` groups the numbered chapters after it and holds only a line or three of its own
    (:data:`GROUP_LINES_WORDS` words at most): it is no chapter and titles none but the next ("FIRST NARRATIVE."
    with "Contributed by Miss Clack; niece of the late Sir John Verinder", then "CHAPTER I" at its depth). Only
    after the book's first text: a front page ("Legal" over a copyright line) before "Chapter 1" is no group."""
    if not paras or len(paras) > 3 or sum(len(q.split()) for q in paras) > GROUP_LINES_WORDS \
            or _NUMBERED_ENTRY_RE.match(label) or n + 1 >= len(segments) or n + 1 in listed:
        return False
    nxt, nd, blocks = segments[n + 1]
    if nd != segments[n][1] or not nxt:
        return False
    if _NUMBERED_ENTRY_RE.match(label_n := _norm(nxt)):
        return _entry_number(label_n) == 1
    # or over another such group ("SECOND PERIOD." / "(1848-1849.)" over "FIRST NARRATIVE." / ... / "CHAPTER I")
    return _group_lines(*_segment_paragraphs(nxt, blocks), n + 1, segments, listed)


def _title_piece(label: str, title: str, at: int) -> int | None:
    """A nav entry that prints the next piece of the book's title on a title page set as headings ("THE LIFE",
    "OF", "OLAUDAH EQUIANO,", "OR", "GUSTAVUS VASSA," ... of "The Interesting Narrative of the Life of Olaudah
    Equiano, Or Gustavus Vassa, The African"): where the title goes on after it, else None. The first piece
    must be two words or more; each later one starts where the last ended or up to seven words on (a line the
    nav does not list, "BY MEANS OF NATURAL SELECTION,", may stand between)."""
    lt, tt = _tokens(label), _tokens(title)
    if not lt or (at == 0 and len(lt) < 2):
        return None
    for start in range(at, min(at + 8, len(tt)) if at else len(tt)):
        if tt[start:start + len(lt)] == lt:
            return start + len(lt)
    return None


def _chain_titles(titles: list[str]) -> str:
    out = ""
    for t in titles:
        out = _join_title(out, t) if out else _norm(t)
    return out


_CAST_LABEL_AFTER_RE = re.compile(r"\s(?:CHARACTERS|DRAMATIS\s+PERSON\w+|PERSONS\s+REPRESENTED)\W*$")
"""A cast list's label run into the subtitle above it in one nav entry ("EXTRACTION OF SOULS FROM HELL
CHARACTERS")."""


def _segment_paragraphs(title: str | None, blocks: list[_Block]) -> tuple[str, list[str]]:
    """Drop leading headings that repeat the title and contents lists; the rest are paragraphs."""
    title = title or ""
    k = 0
    if title:
        tt = _tokens(title)
        pos = 0
        while k < len(blocks) and pos < len(tt):
            b = blocks[k]
            ht = _tokens(b.text)
            if not b.level and len(ht) > 12:
                break
            if not ht:
                k += 1
                continue
            if tt[pos:pos + len(ht)] == ht:
                pos += len(ht)
                k += 1
                continue
            if pos == 0 and b.level and ht[:len(tt)] == tt:
                title = b.text  # the heading says more than the TOC label
                k += 1
            elif pos == 0 and b.level and len(ht) < len(tt) and ht == [t for t in tt if not t.isdigit()]:
                title = b.text  # the label kept the heading's note mark ("IMMORTALITY:22 A DIALOGUE."): not said
                k += 1
            break
    while k < len(blocks) and blocks[k].level and (_BY_RE.match(blocks[k].text) or _tokens(blocks[k].text) == ["by"]):
        k += 1  # "WRITTEN BY ..." under a work's title, or "by" over the author's name: a title-page line
    rest = blocks[k:]
    # contents lists: 3+ short blocks linking into the book (and a "Contents" label before them)
    out: list[_Block] = []
    i = 0
    while i < len(rest):
        b = rest[i]
        if b.xref and len(b.text.split()) <= 20:
            e = i
            while e < len(rest) and rest[e].xref and len(rest[e].text.split()) <= 20:
                e += 1
            label_before = bool(out) and _CONTENTS_LABEL_RE.match(out[-1].text) is not None
            if e - i >= 3 or label_before or _CONTENTS_LABEL_RE.match(title):
                # the list goes on through lines of several entries run together ("The Anxious Dead The Warrior
                # Isandlwana ...", "II. With the Guns Here ends the account ... complete the picture:")
                while e < len(rest) and rest[e].xref and len(rest[e].text.split()) <= 80:
                    e += 1
                if label_before:
                    out.pop()
                i = e
                continue
            out.extend(rest[i:e])
            i = e
            continue
        out.append(b)
        i += 1
    if out and _CONTENTS_LABEL_RE.match(title) and all(_CONTENTS_LABEL_RE.match(b.text) for b in out):
        out = []
    return title, [b.text for b in out]


# --------------------------------------------------------------------------- the book's own metadata and cover
# (the EPUB reader's Reader.details and Reader.cover: jobs.formats tags the files with them)


def _metadata_log():
    import logging

    return logging.getLogger("booktts.formats")  # the warnings say what the files get: the tags' logger


def epub_details(p: Path) -> dict:
    """Author, year and the cover's member name of the EPUB ``p`` (``{}`` when unreadable, with one
    warning line)."""
    try:
        return _epub_details(Path(p))
    except (InputError, OSError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        _metadata_log().warning("%s: no author/cover metadata (%s)", p, exc)
        return {}


def _epub_opf(ep: _Epub):
    container = ep.xml("META-INF/container.xml", "container file")
    rootfile = next((e for e in container.iter() if _local(e.tag) == "rootfile" and e.get("full-path")), None)
    if rootfile is None:
        return None, None
    opf_path = ep.resolve("", rootfile.get("full-path", ""), "the package file path")
    return (opf_path, ep.xml(opf_path, "package file")) if opf_path else (None, None)


def _epub_details(p: Path) -> dict:
    with zipfile.ZipFile(p) as zf:
        ep = _Epub(p, zf)
        opf_path, opf = _epub_opf(ep)
        if opf is None:
            return {}
        out: dict = {}
        creators = [_norm("".join(e.itertext())) for e in opf.iter() if _local(e.tag) == "creator"]
        if any(creators):
            out["author"] = ", ".join(c for c in creators if c)
        for e in opf.iter():
            if _local(e.tag) == "date":
                m = re.search(r"\b(\d{4})\b", "".join(e.itertext()))
                if m:
                    out["year"] = m.group(1)
                    break
        base = posixpath.dirname(opf_path)
        items = {e.get("id"): e for e in opf.iter() if _local(e.tag) == "item" and e.get("href")}
        cover = next((e for e in items.values() if "cover-image" in (e.get("properties") or "").split()), None)
        if cover is None:  # EPUB 2: <meta name="cover" content="ITEM-ID"/>
            ref = next((e.get("content") for e in opf.iter()
                        if _local(e.tag) == "meta" and (e.get("name") or "").lower() == "cover"), None)
            cover = items.get(ref)
        if cover is not None:
            member = _cover_member(ep, p, base, cover)
            if member:
                out["cover"] = member
        return out


def _cover_member(ep: _Epub, p: Path, base: str, item) -> str | None:
    """The member name of the cover ``item`` of the OPF when it is a JPEG or PNG image (by its first
    bytes, whatever its media-type says) of at most :data:`jobs.metadata.MAX_COVER_BYTES`; else None,
    with one warning line naming the EPUB and the member (the files then get no cover art)."""
    from jobs.metadata import MAX_COVER_BYTES, image_type

    log = _metadata_log()
    href = item.get("href", "")
    kind = (item.get("media-type") or "no media-type").lower()
    member = ep.resolve(base, href, "the cover image")
    real = ep.member(member) if member else None
    if real is None:
        log.warning("%s: its cover %r is not in the EPUB; the files get no cover art", p, member or href)
        return None
    size = ep.infos[real].file_size
    if size > MAX_COVER_BYTES:
        log.warning("%s: its cover %r is %d bytes, more than the %d taken; the files get no cover art", p, real,
                    size, MAX_COVER_BYTES)
        return None
    if image_type(ep.read(real, "cover image")) is None:
        log.warning("%s: its cover %r (%r) is not a JPEG or PNG image; the files get no cover art", p, real, kind)
        return None
    return real


def epub_cover(p: Path, member: str) -> bytes | None:
    """The bytes of the cover ``member`` of the EPUB ``p`` (through :class:`_Epub`'s member-name checks
    and size limits); None, with one warning line, when it is gone or larger than
    :data:`jobs.metadata.MAX_COVER_BYTES`. An unreadable archive is :class:`InputError` or :class:`OSError`."""
    from jobs.metadata import MAX_COVER_BYTES

    try:
        with zipfile.ZipFile(p) as zf:
            ep = _Epub(p, zf)
            real = ep.member(member)
            if real is None or ep.infos[real].file_size > MAX_COVER_BYTES:
                _metadata_log().warning("%s: its cover %r is gone or larger than %d bytes; the files get no cover "
                                        "art", p, member, MAX_COVER_BYTES)
                return None
            return ep.read(real, "cover image")
    except zipfile.BadZipFile as exc:
        raise InputError(str(exc)) from None


def epub_text_chars(p: Path) -> float:
    """About the characters of text of the EPUB ``p`` without parsing it: half the uncompressed size of
    its (X)HTML members (the rest is markup). ``zipfile.BadZipFile`` is a ``ValueError`` here."""
    try:
        with zipfile.ZipFile(p) as z:
            return 0.5 * sum(i.file_size for i in z.infolist() if i.filename.lower().endswith((".xhtml", ".html", ".htm")))
    except zipfile.BadZipFile as exc:
        raise ValueError(str(exc)) from None
