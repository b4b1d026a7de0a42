"""XHTML: an element tree -> blocks (paragraphs and headings) with anchors.

:class:`_Extractor` walks a content document's ``<body>`` and yields :class:`_Block` s: breaks at
block elements, ``<br/><br/>`` stanza splits, heading levels, whether a block links into the
book (a contents entry?), the block index of every ``id``, and the ids it skipped. It drops
images, scripts, ``nav``, page numbers, note markers, Project Gutenberg header/footer elements,
front/back matter by ``epub:type``/``role`` (unless asked to keep it) and footnote bodies
(or reads them inline / at the end). :func:`_parse_html` builds a tree from HTML that is not
well-formed XML, with the stdlib HTML parser.

Gets trees, not files: it does not know zip members, the OPF, the TOC or the XML defences
(``jobs.ingest.epub`` parses and hands trees in), nor how blocks become chapters.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from xml.etree import ElementTree as ET

from jobs.ingest.common import _WS_RE, _is_separator, _norm


# --------------------------------------------------------------------------- element names, HTML fallback


_OPS_NS = "{http://www.idpf.org/2007/ops}"


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


class _HtmlTreeBuilder(HTMLParser):
    """Fallback for content documents that are not well-formed XML: HTML -> ElementTree."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
            "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = ET.Element("html")
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        el = ET.SubElement(self.stack[-1], tag, {k: (v or "") for k, v in attrs})
        if tag not in self.VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        ET.SubElement(self.stack[-1], tag, {k: (v or "") for k, v in attrs})

    def handle_endtag(self, tag):
        for k in range(len(self.stack) - 1, 0, -1):
            if self.stack[k].tag == tag:
                del self.stack[k:]
                return

    def handle_data(self, data):
        parent = self.stack[-1]
        if len(parent):
            parent[-1].tail = (parent[-1].tail or "") + data
        else:
            parent.text = (parent.text or "") + data


def _parse_html(data: bytes) -> ET.Element:
    m = re.search(rb"""(?:encoding|charset)\s*=\s*["']?([A-Za-z0-9_.:-]+)""", data[:2048])
    enc = "utf-8"
    if m:
        try:
            enc = codecs.lookup(m.group(1).decode("ascii")).name
        except LookupError:
            pass
    b = _HtmlTreeBuilder()
    b.feed(data.decode(enc, errors="replace"))
    b.close()
    return b.root


# --------------------------------------------------------------------------- XHTML -> blocks


@dataclass
class _Block:
    text: str
    level: int = 0  # 1..6 for headings
    xref: bool = False  # holds a link into the book (a contents entry?)


_BLOCK_TAGS = {
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog", "div",
    "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hgroup", "hr", "html", "legend", "li", "main", "ol", "p", "pre", "section", "summary", "table", "tbody",
    "tfoot", "thead", "tr", "ul",
}
_SKIP_TAGS = {"head", "script", "style", "svg", "math", "img", "image", "object", "embed", "video", "audio",
              "iframe", "canvas", "noscript", "template", "title", "nav", "rt", "rp", "map", "button", "input",
              "select", "textarea"}
_NOTE_TYPES = {"footnote", "footnotes", "endnote", "endnotes", "rearnote", "rearnotes", "noteref", "pagebreak",
               "annoref"}
_NOTE_ROLES = {"doc-footnote", "doc-endnote", "doc-endnotes", "doc-noteref", "doc-pagebreak"}
#: note bodies (what ``--footnotes inline|end`` reads); the other note types are markers, always dropped
_NOTE_BODY_TYPES = {"footnote", "footnotes", "endnote", "endnotes", "rearnote", "rearnotes"}
_NOTE_BODY_ROLES = {"doc-footnote", "doc-endnote", "doc-endnotes"}
_NOTES_SECTION_TYPES = {"footnotes", "endnotes", "rearnotes"}
_NOTES_SECTION_ROLES = {"doc-endnotes"}
_NOTES_OWN_WORDS = 20
"""Words of its own (outside its note bodies and headings) that make a notes section the contents list
links to a chapter (:meth:`_Extractor._notes_chapter`)."""
#: EPUB structural semantics (``epub:type``, landmarks, OPF guide) of front/back matter that is not
#: read unless ``--include-front-matter``: copyright pages, colophons, contents, indexes, lists.
_MATTER_TYPES = {"copyright-page", "copyright", "colophon", "imprint", "toc", "index", "loi", "lot", "landmarks",
                 "doc-colophon", "doc-toc", "doc-index"}
_MARKER_TEXT_RE = re.compile(r"^\s*(?:\[\s*\d{1,4}\s*\]|\(\s*\d{1,4}\s*\)|\d{1,4}|[*\u2020\u2021\u00a7\u00b6]+)\s*$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_NAV_LINK_RE = re.compile(r"^\W*(?:(?:go\s+)?back|top(?:\s+of\s+(?:the\s+)?page)?"
                          r"|(?:(?:back|return|go)\s+)?to\s+(?:the\s+)?(?:top|contents|table\s+of\s+contents|index|text|start)"
                          r"|\u21a9\ufe0e?)\W*$", re.I)
"""A link that only moves the reader about the book ("back" under a picture's page, "Back to Top", "[To Contents]",
"Return to Contents"): its words are not read."""


def _attr_tokens(el: ET.Element, name: str) -> set[str]:
    v = el.get(name)
    if v is None and name == "type":
        v = el.get(_OPS_NS + "type") or el.get("epub:type")
    return set(v.split()) if v else set()


_FIGURE_CLASS_RE = re.compile(r"^(?:fig|figure|fig-?(?:left|right|center|centre)|illus|illustration|image|caption)$",
                              re.I)
"""Classes of the boxes an illustration sits in (Gutenberg's "fig", "figleft", "figcenter")."""


_NOTE_BLOCK_TAGS = {"p", "div", "li", "aside", "dd", "td"}
"""Elements that may hold a note's body."""
_NOTE_HOLDER_TAGS = {"p", "div", "li", "aside", "dd", "td", "section", "article", "table", "ul", "ol", "blockquote",
                     "h1", "h2", "h3", "h4", "h5", "h6"}
"""Elements a note's body does not hold: an element with one of them inside is more than a note."""


def _marker_ids(body: ET.Element) -> set[str]:
    """Ids of the note marks in ``body``: a link whose text is a mark ("22", "[1]", "*") to a place in a
    document ("#linknote-22"), an empty anchor right before one (``<a id="footnote1tag"/><a href=
    "#footnote1"><sup>1</sup></a>``) and an element wrapping one (``<sup id="r1"><a ...>1</a></sup>``)."""
    def mark(a: ET.Element) -> bool:
        return _local(a.tag) == "a" and "#" in (a.get("href") or "") \
            and bool(_MARKER_TEXT_RE.match("".join(a.itertext()) or "x"))

    out = set()
    for parent in body.iter():
        kids = list(parent)
        for n, el in enumerate(kids):
            inner = el if mark(el) else next((d for d in el.iter() if mark(d)), None) \
                if _local(el.tag) == "sup" else None
            if inner is None:
                continue
            out |= {x.get("id") for x in (el, inner) if x.get("id")}
            before = kids[n - 1] if n else None
            if before is not None and _local(before.tag) == "a" and before.get("id") and not before.get("href") \
                    and not "".join(before.itertext()).strip():
                out.add(before.get("id"))
    return out


class _Extractor:
    """XHTML body -> blocks (paragraphs and headings), with the block index of every id."""

    def __init__(self, footnotes: str = "skip", front_matter: bool = False, listed: set[str] | None = None) -> None:
        self.footnotes = footnotes
        self.listed = listed or set()
        """Ids the book's contents list (nav or NCX) links to in this document."""
        self._read_notes: set[int] = set()
        """Elements inside a notes section read as a chapter (:meth:`_notes_chapter`): their note bodies are read."""
        self.front_matter = front_matter
        self.notes: list[_Block] = []
        """Note bodies set aside by ``footnotes="end"`` (read after the document's text)."""
        self.blocks: list[_Block] = []
        self.anchors: dict[str, int] = {}
        self.skipped_ids: set[str] = set()
        self._buf: list[str] = []
        self._heading = 0
        self._pre = 0
        self._xref = False
        self._markers: set[str] = set()

    def run(self, root: ET.Element) -> _Extractor:
        body = next((e for e in root.iter() if _local(e.tag) == "body"), root)
        self._markers = _marker_ids(body)
        self._walk(body)
        self._flush()
        self.blocks.extend(self.notes)
        return self

    def _skip(self, el: ET.Element, tag: str) -> bool:
        if tag in _SKIP_TAGS or el.get("hidden") is not None:
            return True
        if el.get("id") in ("pg-header", "pg-footer"):
            return True
        classes = _attr_tokens(el, "class")
        if "pg-boilerplate" in classes or "pagenum" in classes or any(_FIGURE_CLASS_RE.match(c) for c in classes):
            return True  # an illustration's box: its file name or caption is not read (as "[Illustration: ...]")
        types, roles = _attr_tokens(el, "type"), _attr_tokens(el, "role")
        if not self.front_matter and (types | roles) & _MATTER_TYPES:
            return True
        if id(el) in self._read_notes and (types & _NOTE_BODY_TYPES or roles & _NOTE_BODY_ROLES):
            return False
        if self._notes_chapter(el, types, roles):
            self._read_notes |= {id(d) for d in el.iter()}
            return False
        if tag in _NOTE_BLOCK_TAGS and self._links_back(el):
            types = types | {"footnote"}  # a note body in markup without semantics: its link back to the marker
        if self.footnotes != "skip" and (types & _NOTE_BODY_TYPES or roles & _NOTE_BODY_ROLES):
            if self.footnotes == "inline":
                return False
            sub = _Extractor("inline", self.front_matter)  # the note body itself is read
            sub._walk(el)
            sub._flush()
            self.notes.extend(sub.blocks)
            return True
        if types & _NOTE_TYPES or roles & _NOTE_ROLES:
            return True
        if tag == "sup":
            if any(_local(d.tag) == "a" and d.get("href") for d in el.iter()):
                return True
            text = "".join(el.itertext())
            return bool(text.strip()) and bool(_MARKER_TEXT_RE.match(text)) and not text.strip().isdigit()
        if tag == "a":
            href = el.get("href") or ""
            if "#" in href and _MARKER_TEXT_RE.match("".join(el.itertext()) or "x"):
                return True
            if href and not _SCHEME_RE.match(href) and _NAV_LINK_RE.match("".join(el.itertext())):
                return True
        return False

    def _links_back(self, el: ET.Element) -> bool:
        """``el`` is a note's body: its first link points back to a note marker of this document (Project
        Gutenberg's '22 (<a href="#linknoteref-22">return</a>) [ Translator's Note ...]', or "[1]" linking
        to the "[1]" in the text)."""
        if not self._markers:
            return False
        link = next((d for d in el.iter() if _local(d.tag) == "a" and d.get("href")), None)
        href = link.get("href", "") if link is not None else ""
        if "#" not in href or href.split("#", 1)[1] not in self._markers:
            return False
        if any(_local(d.tag) in _NOTE_HOLDER_TAGS for d in el.iter() if d is not el):
            return False  # a note is one paragraph: a chapter's <div> whose first link is a mark is no note
        before = []  # the text before the link: at most a label ("Footnote 1", "22 (")
        for d in el.iter():
            if d is link:
                break
            before += [d.text or "", d.tail or ""] if d is not el else [d.text or ""]
        return len("".join(before).split()) <= 3

    def _notes_chapter(self, el: ET.Element, types: set[str], roles: set[str]) -> bool:
        """A notes section that the book's contents list links to and that holds text of its own outside
        its note bodies (the author's words on his notes: NOTES ON "THE WASTE LAND" opening "Not only the
        title, but the plan ...") is a chapter of the book, read with its note bodies whatever ``footnotes``
        says; a list of notes and nothing else (an "Endnotes" section) is not."""
        if not (types & _NOTES_SECTION_TYPES or roles & _NOTES_SECTION_ROLES) or el.get("id") not in self.listed:
            return False
        inside = set()
        for d in el.iter():
            if d is not el and (_attr_tokens(d, "type") & _NOTE_BODY_TYPES
                                or _attr_tokens(d, "role") & _NOTE_BODY_ROLES):
                inside |= {id(x) for x in d.iter()}
        own = " ".join(t for d in el.iter() if id(d) not in inside and _local(d.tag) not in
                       ("h1", "h2", "h3", "h4", "h5", "h6") for t in [d.text or ""])
        return len(own.split()) >= _NOTES_OWN_WORDS

    def _walk(self, top: ET.Element) -> None:
        # an explicit stack, not recursion: a hostile document may nest elements thousands deep
        stack: list[tuple[str, object]] = [("enter", top)]
        while stack:
            kind, item = stack.pop()
            if kind == "text":
                self._text(item)  # type: ignore[arg-type]
            elif kind == "exit":
                tag, block, saved = item  # type: ignore[misc]
                if tag in ("td", "th"):
                    self._buf.append(" ")
                if block:
                    self._flush()
                self._heading, self._pre = saved
            else:
                self._enter(item, stack)  # type: ignore[arg-type]

    def _enter(self, el: ET.Element, stack: list) -> None:
        tag = _local(el.tag)
        if not tag:
            return
        if self._skip(el, tag):
            for sub in el.iter():
                i = sub.get("id")
                if i:
                    self.skipped_ids.add(i)
            return
        for key in ("id", "name") if tag == "a" else ("id",):
            v = el.get(key)
            if v and v not in self.anchors:
                self.anchors[v] = len(self.blocks)
        block = tag in _BLOCK_TAGS
        if block:
            self._flush()
        if tag == "br":
            self._buf.append("\n")
        elif tag in ("td", "th"):
            self._buf.append(" ")
        saved = (self._heading, self._pre)
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._heading = int(tag[1])
        if tag == "pre":
            self._pre += 1
        if tag == "a":
            href = el.get("href")
            if href and not _SCHEME_RE.match(href) and id(el) not in self._read_notes:
                self._xref = True  # a note's link back to its line ("Line 20.") makes no contents entry
        self._text(el.text)
        stack.append(("exit", (tag, block, saved)))
        for child in reversed(el):
            if child.tail:
                stack.append(("text", child.tail))
            stack.append(("enter", child))

    def _text(self, s: str | None) -> None:
        if s:
            self._buf.append(s if self._pre else _WS_RE.sub(" ", s))

    def _flush(self) -> None:
        raw = "".join(self._buf)
        self._buf = []
        xref, self._xref = self._xref, False
        if not raw.strip():
            return
        pieces = [raw] if self._heading else re.split(r"\n[ \t\u00a0]*\n", raw)
        for piece in pieces:
            text = _norm(piece)
            if text and not _is_separator(text):
                self.blocks.append(_Block(text, self._heading, xref))
