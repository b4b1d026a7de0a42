"""Text normalisation for speech (English): written text -> the words a reader would say.

``normalize(text, heading=False)`` is a pure function, called on each utterance's text after
segmentation and before phonemization (the plan and manifest keep the written ``text`` and
record the result as ``spoken_text``). It never drops a word of the source; it rewrites the
forms espeak-ng reads badly:

* currency (``$5`` "five dollars", ``£20.50`` "twenty pounds fifty"), percentages;
* dates (``12/25/2023``, ``December 25, 2023``, ``2023-12-25``), times (``3:30 p.m.``);
* years (any 4-digit number from 1100 to 2099 without a thousands comma reads as a year:
  "eighteen eighty-seven", "nineteen ninety-nine", "twenty twenty-three"), decades (``1990s``);
* ordinals (``21st``), cardinals with thousands separators and decimals (via ``num2words``);
* roman numerals after chapter/book/part/... keywords, alone in a heading, and after a regnal
  name ("Louis XIV" "Louis the fourteenth");
* abbreviations by context: "St." (Saint before a name, Street after one), "Dr." (Doctor /
  Drive), "Mt.", "Mr.", "e.g.", "i.e.", "etc.", "No. 5" ("number five"), "Chap. II." ("Chapter two"),
  "vol. 3", "Fig. 4", "Sect. 2" before their numbers;
* letters said by their names: "a.m."/"p.m.", dotted initialisms ("U.S.A.", "M.A."), degrees
  ("Ph.D.", "B.Sc."), a capital "A" that is a letter ("Plan A", "A-B", "grade A."; the article
  "A cat" and the pronoun "I" stay words); espeak-ng reads a lone capital A as the article, so the
  letter is written "Eigh";
* units after a number ("5 km" "five kilometers", "1 lb" "one pound", "10 mph"; "in" only where
  it is a length: "5 in." or "5 in long", not "5 in the morning");
* unicode fractions ("2½" "two and a half", "½" "one half", spaced from the word before);
* ranges: a dash between numbers, a hyphen between years or after "pages", "pp.", "chapters"...
  ("pages 5-10" "pages five to ten"), an en dash between two capitals ("A–B" "Eigh to B");
* markup: asterisks are not read ("*" is never "asterisk"); :func:`is_scene_break` tells a
  paragraph that is only a scene-break marker ("* * *", "***", "⁂"), which the segmenter turns into
  a pause;
* URLs and e-mail addresses ("example dot com slash books");
* footnote markers (``[1]``, wherever they stand: Project Gutenberg texts print them spaced, "Looking for
  lodgings.” [3] I answered", and a sentence may start with one; superscript digits) are dropped;
* dashes (``—``, ``--``, spaced ``–``) and mid-sentence ellipses become a comma (a short pause);
  a dash between numbers reads "to".

It does NOT decide pauses (jobs/segment.py does), pronounce words (the lexicon and espeak-ng do),
or read other languages' numbers and abbreviations.

Text inside Piper's ``[[ phonemes ]]`` blocks is passed through untouched.
"""

from __future__ import annotations

import re

from num2words import num2words

__all__ = ["normalize", "split_phoneme_blocks", "roman_to_int", "is_scene_break"]

PHONEME_BLOCK = re.compile(r"(\[\[.*?\]\])", re.S)

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_MONTH_ABBR = {m[:3].lower(): m for m in _MONTHS} | {"sept": "September"}
_MONTH_RE = (r"(?P<month>January|February|March|April|May|June|July|August|September|October|November|December"
             r"|Jan\.?|Feb\.?|Mar\.?|Apr\.?|Jun\.?|Jul\.?|Aug\.?|Sept?\.?|Oct\.?|Nov\.?|Dec\.?)")
_ROMAN_STRICT = re.compile(r"^M{0,4}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})$")
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_NUMBER_KEYWORDS = {"chapter", "book", "part", "volume", "vol", "act", "scene", "canto", "stave", "section",
                    "letter", "appendix", "psalm", "article", "lesson", "movement", "symphony", "no", "number",
                    "war", "type", "phase", "class", "grade", "level", "series", "plate", "figure", "fig",
                    "table"}
_REGNAL_NAMES = set("""Henry Edward George William Richard Charles James Louis Elizabeth Mary Anne John Paul Pius
Leo Gregory Benedict Innocent Clement Alexander Nicholas Peter Catherine Frederick Philip Ferdinand Victor Emmanuel
Napoleon Otto Gustav Gustavus Constantine Ptolemy Ramesses Rameses Amenhotep Thutmose Alfonso Sancho Pedro Juan Carlos
Felipe Ivan Wilhelm Friedrich Ludwig Karl Francis Franz Joseph Leopold Rudolf Harold David Robert Urban Boniface
Sixtus Julius Honorius Stephen Edmund Olaf Haakon Christian Sigismund Casimir Selim Suleiman Mehmed Murad Malcolm
Duncan Kenneth Alexander Umberto Manuel Sebastian Afonso Hugh Baldwin Conrad Lothair Pepin Childeric Clovis Darius
Xerxes Artaxerxes Cyrus Antiochus Seleucus Cleopatra Herod Innocent Adrian Hadrian Martin Sergius Felix Sylvester
Eugene Eugenius Theodore Basil Michael Andronikos Manuel Isaac""".split())
_ABBREVIATIONS = {  # written (lower case, without the final full stop) -> spoken
    "mr": "Mister", "mrs": "Missus", "messrs": "Messieurs", "prof": "Professor", "mt": "Mount", "jr": "Junior",
    "sr": "Senior", "capt": "Captain", "col": "Colonel", "gen": "General", "lt": "Lieutenant", "sgt": "Sergeant",
    "rev": "Reverend", "hon": "Honourable", "gov": "Governor", "sen": "Senator", "rep": "Representative",
    "vs": "versus", "etc": "et cetera", "approx": "approximately", "dept": "department", "ft": "Fort",
}
_STOP_ABBR_RE = re.compile(r"\b(?P<w>Mr|Mrs|Messrs|Prof|Mt|Jr|Sr|Capt|Col|Gen|Lt|Sgt|Rev|Hon|Gov|Sen|Rep|vs|etc|approx"
                           r"|Dept|Ft)\.(?P<after>[\"'”’»)\]]*)(?=\s|$)", re.I)
_LATIN_RE = re.compile(r"\b(?P<w>e\.\s?g|i\.\s?e|a\.\s?m|p\.\s?m|viz|cf)\.(?P<after>[\"'”’»)\]]*)(?=[\s,;:]|$)", re.I)
#: How a letter is written so that espeak-ng says its name: a lone capital A is read as the article
#: ("uh") in running text; "Eigh" is read as the letter's name. Every other capital is read as its name.
_LETTER_SAY = {"A": "Eigh"}
_LATIN = {"eg": "for example", "ie": "that is", "am": "Eigh M", "pm": "P M", "viz": "namely", "cf": "compare"}
#: Academic degrees written with dots or as one word: said letter by letter (except "Phil").
_DEGREE_TITLE_RE = re.compile(r"(?<![\w.])(?P<w>Ph\.\s?D|PhD|D\.\s?Phil|M\.\s?Phil|B\.\s?Sc|M\.\s?Sc|LL\.\s?[BM])"
                              r"(?P<dot>\.?)(?P<after>[\"'”’»)\]]*)(?=[\s,;:!?]|$)")
_DEGREE_TITLES = {"phd": "P H D", "dphil": "D Phil", "mphil": "M Phil", "bsc": "B S C", "msc": "M S C",
                  "llb": "L L B", "llm": "L L M"}
_NUMBER_ABBR_RE = re.compile(r"(?<![\w.])(?:(?P<w>No|Nos|NO|no|nos)\.|#)\s?(?=\d)")
_KEYWORD_ABBR_RE = re.compile(r"(?<![\w.])(?P<w>Chap|CHAP|chap|Vol|VOL|vol|Fig|FIG|fig|Sect|SECT|sect)\."
                              r"\s?(?=\d|[IVXLC]+\b)")
"""A keyword's abbreviation before its number: "Chap. II." "Chapter two.", "vol. 3" "volume three"."""
_KEYWORD_ABBR_WORDS = {"chap": "chapter", "vol": "volume", "fig": "figure", "sect": "section"}
#: Words after which a lone capital A names a letter ("Plan A", "vitamin A", "Exhibit A").
_LETTER_KEYWORDS = {"plan", "vitamin", "type", "grade", "class", "group", "section", "row", "exhibit", "appendix",
                    "platform", "gate", "block", "wing", "letter", "option", "category", "level", "part", "figure",
                    "fig", "table", "team", "side", "track", "list", "building", "annex", "schedule", "form",
                    "model", "series", "size", "division", "league", "hepatitis", "point", "box", "pier", "ward",
                    "floor", "unit", "zone", "sheet", "variant", "case", "route", "step", "stage", "phase"}
_LONE_A_RE = re.compile(r"(?<![\w'’.\-–—/])A(?![\w'’\-–—/])")
_LETTER_PAIR_RE = re.compile(r"(?<![\w'’.\-–—/])(?P<a>[A-Z])(?P<sep>\s?[-–—/]\s?)(?P<b>[A-Z])(?![\w'’\-–—/])")
#: Units after a number: written -> (singular, plural). Case matters ("5 m" meters, "5 M" is not a unit).
_UNITS = {
    "km/h": ("kilometer per hour", "kilometers per hour"), "kph": ("kilometer per hour", "kilometers per hour"),
    "m/s": ("meter per second", "meters per second"), "mph": ("mile per hour", "miles per hour"),
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "yd": ("yard", "yards"), "yds": ("yard", "yards"),
    "ft": ("foot", "feet"), "in": ("inch", "inches"), "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"), "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"), "ml": ("milliliter", "milliliters"), "mL": ("milliliter", "milliliters"),
    "kW": ("kilowatt", "kilowatts"), "kWh": ("kilowatt hour", "kilowatt hours"), "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"), "GHz": ("gigahertz", "gigahertz"),
    "KB": ("kilobyte", "kilobytes"), "kB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"), "TB": ("terabyte", "terabytes"), "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"), "secs": ("second", "seconds"), "min": ("minute", "minutes"),
    "mins": ("minute", "minutes"), "hr": ("hour", "hours"), "hrs": ("hour", "hours"),
}
_UNIT_RE = re.compile(r"(?<![\w.,])(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?\s?(?P<u>"
                      + "|".join(sorted(map(re.escape, _UNITS), key=len, reverse=True))
                      + r")(?P<dot>\.?)(?![\w/]|\.\w)")
#: Words after "5 in" that make it a length ("5 in long"); anything else keeps "in" a preposition.
_INCH_CONTEXT = {"long", "of", "wide", "high", "tall", "deep", "thick", "across", "square", "by", "x", "×", "diameter",
                 "screen", "display", "length", "width", "height", "depth"}
_HYPHEN_RANGE_RE = re.compile(r"(?<![\w.,\-])(?P<a>\d{1,4})-(?P<b>\d{1,4})(?![\w\-]|[.,]\d)")
#: Words before "5-10" that make the hyphen a range ("pages 5-10" "pages five to ten").
_RANGE_KEYWORDS = {"pages", "page", "pp", "p", "chapters", "ch", "chs", "verses", "vv", "lines", "ll", "nos",
                   "numbers", "years", "ages", "aged", "sections", "items", "steps", "rooms", "from", "between",
                   "sizes", "figures", "figs", "plates", "tables", "psalms", "articles"}
_ASTERISKS_RE = re.compile(r"\s*\*+\s*")
#: Characters a scene-break line is made of ("* * *", "***", "⁂", "~ ~ ~", "#", "— — —").
_BREAK_CHARS = set("*⁂✻✱✳❧☙◆◇•·#~=-–—_")
_SAINT_RE = re.compile(r"\b(?P<w>St|Dr|Ste)\.(?=\s|$)")
_INITIALISM_RE = re.compile(r"(?<![\w.])(?P<w>(?:[A-Za-z]\.){2,})(?P<after>[\"'”’»)\]]*)(?=\s|$|[,;:])")
_URL_RE = re.compile(r"(?:(?:https?|ftp)://|www\.)[^\s<>\"]+", re.I)
_EMAIL_RE = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_FOOTREF_RE = re.compile(r"\s?\[\d{1,3}\](?!\])|[\u00b9\u00b2\u00b3\u2070\u2074-\u2079]+(?=[\s.,;:!?\"'”’)]|$)")
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
             "€": ("euro", "euros", "cent", "cents"), "¥": ("yen", "yen", "sen", "sen")}
_SCALE = r"(?:\s?(?P<scale>thousand|million|billion|trillion|[kmb]n?)\b)?"
_CURRENCY_RE = re.compile(r"(?P<sym>[$£€¥])\s?(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d{1,2}))?" + _SCALE, re.I)
_PERCENT_RE = re.compile(r"(?<![\w.])(?P<num>\d+(?:\.\d+)?)\s?(?:%|per ?cent\b)")
_DATE_NUM_RE = re.compile(r"(?<![\w/.])(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<y>\d{4}|\d{2})(?![\w/])")
_DATE_ISO_RE = re.compile(r"(?<![\w-])(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?![\w-])")
_DATE_MDY_RE = re.compile(_MONTH_RE + r"\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?(?=\W|$)")
_DAY_RANGE_DMY_RE = re.compile(r"(?<![\w.,-])(?P<a>\d{1,2})(?:st|nd|rd|th)?\s?[-–]\s?(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+"
                               r"(?:of\s+)?" + _MONTH_RE + r"(?=\W|$)")
_DAY_RANGE_MDY_RE = re.compile(_MONTH_RE + r"\s+(?P<a>\d{1,2})(?:st|nd|rd|th)?\s?[-–]\s?(?P<day>\d{1,2})(?:st|nd|rd|th)?(?![\w-])")
_DATE_DMY_RE = re.compile(r"(?<![\w.])(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH_RE + r"(?=\W|$)")
_TIME_RE = re.compile(r"(?<![\w:.])(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?(?![\w:])"
                      r"(?:\s?(?P<ampm>[ap])\.?\s?m\b\.?)?", re.I)
_HOUR_AMPM_RE = re.compile(r"(?<![\w:.])(?P<h>\d{1,2})\s?(?P<ampm>[ap])\.?\s?m\b\.?", re.I)
_DECADE_RE = re.compile(r"(?<![\w.,])(?:(?P<c>1[1-9]|20)|')?(?P<d>[1-9]0|00)'?s\b")
_ORDINAL_RE = re.compile(r"(?<![\w.,])(?P<n>\d{1,9})(?P<suf>st|nd|rd|th)\b", re.I)
_RANGE_RE = re.compile(r"(?<=\d)\s?[–—]\s?(?=\d)")
_NUMBER_RE = re.compile(r"(?<![\w.,])(?P<neg>-)?(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?(?![\w]|[.,]\d)")
_ROMAN_TOKEN_RE = re.compile(r"\b(?P<r>[IVXLCDM]+)\b(?P<dot>\.?)")
_DASH_RE = re.compile(r"\s*(?:—|―|--+|\s–\s)\s*")
_ELLIPSIS_RE = re.compile(r"\s*(?:…|\.\s?\.\s?\.)(?P<rest>\s*)")
_SPACES_RE = re.compile(r"[ \t]{2,}")
_FRACTION_RE = re.compile(r"(?<![\w/.,])(?P<a>\d{1,2})/(?P<b>[2-9]|10)(?![\w/]|[.,]\d)")
_VULGAR = {"½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5), "⅖": (2, 5), "⅗": (3, 5),
           "⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅐": (1, 7), "⅛": (1, 8), "⅜": (3, 8), "⅝": (5, 8), "⅞": (7, 8),
           "⅑": (1, 9), "⅒": (1, 10)}
_VULGAR_RE = re.compile(r"(?:(?<![\w.,])(?P<whole>\d+)\s?)?(?P<f>[" + "".join(_VULGAR) + "])")
_DEGREE_RE = re.compile(r"(?<=\d)\s?°\s?(?P<u>[CF](?![a-z]))?")


def split_phoneme_blocks(text: str) -> list[tuple[bool, str]]:
    """``text`` as (is_phonemes, part) pieces: Piper's ``[[ ... ]]`` blocks and the text between them."""
    return [(p.startswith("[[") and p.endswith("]]"), p) for p in PHONEME_BLOCK.split(text) if p]


def roman_to_int(s: str) -> int | None:
    """The value of a well-formed upper-case roman numeral, else None."""
    if not s or not _ROMAN_STRICT.match(s):
        return None
    total = 0
    for a, b in zip(s, s[1:] + " "):
        v = _ROMAN_VALUES[a]
        total += -v if b != " " and _ROMAN_VALUES[b] > v else v
    return total


def _words(n, to: str = "cardinal") -> str:
    """num2words without its commas (they would be spoken as pauses)."""
    return num2words(n, to=to).replace(",", "")


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def _cardinal_text(int_part: str, frac: str | None = None) -> str:
    digits = int_part.replace(",", "")
    if len(digits) > 1 and digits.startswith("0") and "," not in int_part:
        out = " ".join(_words(int(d)) for d in digits)  # "007": digit by digit
    elif len(digits) > 15:
        out = " ".join(_words(int(d)) for d in digits)
    else:
        out = _words(int(digits))
    if frac:
        out += " point " + " ".join(_words(int(d)) for d in frac)
    return out


def _year_text(y: int) -> str:
    return _words(y, to="year")


def _keep_stop(m: re.Match, text: str) -> str:
    """A full stop that ends the text (and so the sentence) is kept after an expanded abbreviation."""
    after = m.group("after") if "after" in m.re.groupindex else ""
    rest = text[m.end():]
    return ("." if not rest.strip() else "") + (after or "")


def _currency(m: re.Match) -> str:
    one, many, sub_one, sub_many = _CURRENCY[m.group("sym")]
    frac = m.group("frac")
    scale = (m.group("scale") or "").lower()
    scale = {"k": "thousand", "m": "million", "mn": "million", "b": "billion", "bn": "billion"}.get(scale, scale)
    if scale:
        amount = _cardinal_text(m.group("int"), frac)
        return f"{amount} {scale} {many}"
    if len(m.group("int").replace(",", "")) > 15:  # too long to say as a number (num2words overflows): digits
        out = f"{_cardinal_text(m.group('int'))} {many}"
    else:
        whole = _int(m.group("int"))
        out = f"{_words(whole)} {one if whole == 1 else many}"
    if frac:
        cents = int(frac.ljust(2, "0"))
        if cents:
            out += f" and {_words(cents)} {sub_one if cents == 1 else sub_many}"
    return out


def _date(month: int, day: int, year: int | None) -> str:
    out = f"{_MONTHS[month - 1]} {_words(day, 'ordinal')}"
    return out + (f", {_year_text(year)}" if year is not None else "")


def _numeric_date(m: re.Match) -> str:
    a, b, y = int(m.group("a")), int(m.group("b")), m.group("y")
    year = int(y) if len(y) == 4 else (2000 + int(y) if int(y) < 50 else 1900 + int(y))
    if 1 <= a <= 12 and 1 <= b <= 31:
        return _date(a, b, year)  # US order first: 12/25/2023
    if 1 <= b <= 12 and 1 <= a <= 31:
        return _date(b, a, year)  # 25/12/2023
    return m.group(0)


def _iso_date(m: re.Match) -> str:
    y, mo, d = int(m.group("y")), int(m.group("m")), int(m.group("d"))
    if 1 <= mo <= 12 and 1 <= d <= 31:
        return _date(mo, d, y)
    return m.group(0)


def _month_name(s: str) -> str:
    s = s.rstrip(".")
    return s if s in _MONTHS else _MONTH_ABBR.get(s.lower(), s)


def _mdy(m: re.Match) -> str:
    day = int(m.group("day"))
    if not 1 <= day <= 31:
        return m.group(0)
    if m.group("month") == "May" and not m.group(0)[len("May"):].strip()[:1].isdigit():
        return m.group(0)
    return f"{_month_name(m.group('month'))} {_words(day, 'ordinal')}"


def _day_range(m: re.Match, month_first: bool) -> str:
    """"3-4 October" "the third to the fourth of October"; "October 3-4" "October third to fourth"."""
    a, b = int(m.group("a")), int(m.group("day"))
    if not (1 <= a < b <= 31):
        return m.group(0)
    month = _month_name(m.group("month"))
    if month_first:
        return f"{month} {_words(a, 'ordinal')} to {_words(b, 'ordinal')}"
    return f"the {_words(a, 'ordinal')} to the {_words(b, 'ordinal')} of {month}"


def _dmy(m: re.Match) -> str:
    day = int(m.group("day"))
    if not 1 <= day <= 31:
        return m.group(0)
    return f"the {_words(day, 'ordinal')} of {_month_name(m.group('month'))}"


def _clock(h: int, mi: int, ampm: str | None) -> str:
    if mi == 0:
        out = f"{_words(h)}" + ("" if ampm else " o'clock")
    elif mi < 10:
        out = f"{_words(h)} oh {_words(mi)}"
    else:
        out = f"{_words(h)} {_words(mi)}"
    if ampm:
        out += " " + _letters(ampm + "m")
    return out


def _time(m: re.Match, text: str) -> str:
    h, mi = int(m.group("h")), int(m.group("m"))
    if h > 24 or mi > 59:
        return m.group(0)
    out = _clock(h, mi, m.group("ampm"))
    if m.group("s"):
        out += f" and {_words(int(m.group('s')))} seconds"
    if m.group("ampm") and m.group(0).endswith(".") and not text[m.end():].strip():
        out += "."
    return out


def _hour_ampm(m: re.Match, text: str) -> str:
    h = int(m.group("h"))
    if not 1 <= h <= 12:
        return m.group(0)
    out = f"{_words(h)} {_letters(m.group('ampm') + 'm')}"
    if m.group(0).endswith(".") and not text[m.end():].strip():
        out += "."
    return out


def _decade(m: re.Match) -> str:
    c, d = m.group("c"), m.group("d")
    if c is None:
        if d == "00":
            return m.group(0)
        word = _words(int(d))
    elif d == "00":
        word = _words(int(c + "00"), "year")  # "1900s": "nineteen hundreds"
    else:
        word = _words(int(c + d), "year")
    return (word[:-1] + "ies") if word.endswith("y") else word + "s"


def _fraction_words(a: int, b: int) -> str:
    names = {2: ("half", "halves"), 4: ("quarter", "quarters")}
    one, many = names.get(b, (_words(b, "ordinal"), _words(b, "ordinal") + "s"))
    return f"{'one' if a == 1 else _words(a)} {one if a == 1 else many}"


def _fraction(m: re.Match) -> str:
    a, b = int(m.group("a")), int(m.group("b"))
    return _fraction_words(a, b) if 0 < a < b else m.group(0)


def _vulgar(m: re.Match, text: str) -> str:
    a, b = _VULGAR[m.group("f")]
    frac = _fraction_words(a, b)
    if m.group("whole"):
        out = f"{_cardinal_text(m.group('whole'))} and {'a ' + frac.removeprefix('one ') if a == 1 else frac}"
    else:
        out = frac
    # "Add½ cup", "½cup": the words stand apart from the words around them
    before = text[m.start() - 1] if m.start() else " "
    after = text[m.end()] if m.end() < len(text) else " "
    return (" " if before.isalnum() else "") + out + (" " if after.isalnum() else "")


def _degrees(m: re.Match) -> str:
    unit = {"C": " Celsius", "F": " Fahrenheit"}.get(m.group("u") or "", "")
    return " degrees" + unit


def _ordinal(m: re.Match) -> str:
    return _words(int(m.group("n")), "ordinal")


def _number(m: re.Match, text: str) -> str:
    int_part, frac = m.group("int"), m.group("frac")
    neg = "minus " if m.group("neg") else ""
    digits = int_part.replace(",", "")
    if not frac and "," not in int_part and len(digits) == 4 and 1100 <= int(digits) <= 2099 and not neg:
        before = text[:m.start()].rstrip().rsplit(None, 1)
        prev = before[-1].lower().rstrip(".") if before else ""
        if prev not in ("no", "number", "page", "p", "pp", "room", "#", "flight", "route"):
            return _year_text(int(digits))
    return neg + _cardinal_text(int_part, frac)


def _spell_url(s: str) -> str:
    trail = ""
    while s and s[-1] in ".,;:!?)]}\"'”’":
        trail = s[-1] + trail
        s = s[:-1]
    s = re.sub(r"^(?:https?|ftp)://", "", s, flags=re.I)
    parts = re.split(r"([./@:_?=&#~+-])", s)
    names = {".": "dot", "/": "slash", "@": "at", ":": "colon", "_": "underscore", "?": "question mark",
             "=": "equals", "&": "and", "#": "hash", "~": "tilde", "+": "plus", "-": "dash"}
    words = []
    for p in parts:
        if not p:
            continue
        if p in names:
            words.append(names[p])
        elif p.lower() == "www":
            words.append("W W W")
        elif p.isdigit():
            words.append(_cardinal_text(p))
        else:
            words.append(p)
    while words and words[-1] == "slash":
        words.pop()
    return " ".join(words) + trail


def _prev_word(text: str, pos: int) -> str:
    w = text[:pos].rstrip().rsplit(None, 1)
    return w[-1] if w else ""


def _next_word(text: str, pos: int) -> str:
    w = text[pos:].split(None, 1)
    return w[0] if w else ""


def _capitalised(w: str) -> bool:
    w = w.lstrip("\"'“‘(")
    return bool(w) and (w[0].isupper() or w[0].isdigit())


def _saint(m: re.Match, text: str) -> str:
    w = m.group("w")
    prev, nxt = _prev_word(text, m.start()), _next_word(text, m.end())
    name_after = _capitalised(nxt) and not nxt[:1].isdigit()
    name_before = bool(prev) and (prev[0].isupper() or prev[0].isdigit()) and not prev.endswith((".", "!", "?"))
    if w == "Ste":
        return "Sainte"
    if name_after and not (name_before and not name_after):
        spoken = "Saint" if w == "St" else "Doctor"
    elif name_before:
        spoken = "Street" if w == "St" else "Drive"
    else:
        spoken = "Street" if w == "St" else "Doctor"
    return spoken + ("." if not text[m.end():].strip() else "")


def _roman(m: re.Match, text: str, heading: bool) -> str:
    r = m.group("r")
    value = roman_to_int(r)
    if value is None:
        return m.group(0)
    prev = _prev_word(text, m.start())
    prev_l = prev.lower().rstrip(".,:")
    at_start = not text[:m.start()].strip(" \"'“‘(")
    # all-capital running text ("I LIVED IN DC"): only with a keyword
    if prev_l in _NUMBER_KEYWORDS and not prev.endswith((".", ",", ":")):
        return _words(value) + m.group("dot")
    rest = text[m.end():].lstrip()
    if heading and at_start and (m.group("dot") or not rest or rest[0] in ":;,-\u2013\u2014"):
        return _words(value) + m.group("dot")
    if prev in _REGNAL_NAMES and (len(r) > 1 or r == "V"):
        return "the " + _words(value, "ordinal") + m.group("dot")
    if len(r) > 1 and set(r) <= set("IVX") and not _caps_run(text):
        return _words(value) + m.group("dot")
    return m.group(0)


def _caps_run(text: str) -> bool:
    """The text is written in capitals (a shouted line, a heading in capitals)."""
    letters = [c for c in text if c.isalpha()]
    return len(letters) >= 8 and sum(c.isupper() for c in letters) > 0.8 * len(letters)


def _latin(m: re.Match, text: str) -> str:
    key = re.sub(r"[.\s]", "", m.group("w")).lower()
    return _LATIN[key] + _keep_stop(m, text)


def _abbr(m: re.Match, text: str) -> str:
    spoken = _ABBREVIATIONS[m.group("w").lower()]
    if m.group("w").islower() and spoken[0].isupper() and m.group("w").lower() not in ("mr", "mrs"):
        spoken = spoken.lower()
    return spoken + _keep_stop(m, text)


def _initialism(m: re.Match, text: str) -> str:
    letters = m.group("w").replace(".", "")
    return _letters(letters) + _keep_stop(m, text)


def _letters(s: str) -> str:
    """Letters said one by one, by their names ("usa" "U S Eigh")."""
    return " ".join(_LETTER_SAY.get(c, c) for c in s.upper())


def _stop_if_last(m: re.Match, text: str) -> str:
    """A full stop the match ended with is kept when nothing follows (it also ends the sentence)."""
    return "." if m.group("dot") and not text[m.end():].strip() else ""


def _degree_title(m: re.Match, text: str) -> str:
    key = re.sub(r"[.\s]", "", m.group("w")).lower()
    return _DEGREE_TITLES[key] + _stop_if_last(m, text) + m.group("after")


def _keyword_abbr(m: re.Match) -> str:
    w = m.group("w")
    word = _KEYWORD_ABBR_WORDS[w.lower()]
    return (word.capitalize() if w[:1].isupper() else word) + " "


def _number_abbr(m: re.Match) -> str:
    w = m.group("w") or ""
    said = "numbers " if w.lower() == "nos" else "number "
    return said.capitalize() if w[:1].isupper() else said


def _lone_a(m: re.Match, text: str) -> str:
    """A capital A alone: the letter after a word like "Plan", or with no word after it ("got an A.");
    else the article ("A cat")."""
    prev = _prev_word(text, m.start()).lower().strip("\"'“‘(.,:;")
    rest = text[m.end():]
    if prev in _LETTER_KEYWORDS or not re.match(r"\s*[\"'“‘(]*\w", rest):
        return _LETTER_SAY["A"]
    return m.group(0)


def _letter_pair(m: re.Match) -> str:
    """"A-B", "A/B": two letters; "A–Z" (an en or em dash): a range, "Eigh to Z"."""
    joiner = " to " if m.group("sep").strip() in ("–", "—") else " "
    return _letters(m.group("a")) + joiner + _letters(m.group("b"))


def _unit(m: re.Match, text: str) -> str:
    unit, dot = m.group("u"), m.group("dot")
    rest = text[m.end():]
    nxt = _next_word(text, m.end()).lower().strip(".,;:!?\"'”’)")
    if unit == "in" and not (dot or not rest.strip() or rest.lstrip()[:1] in ",;:!?)]" or nxt in _INCH_CONTEXT):
        return m.group(0)  # "5 in the morning": a preposition
    one, many = _UNITS[unit]
    number = _cardinal_text(m.group("int"), m.group("frac"))
    said = one if m.group("int") == "1" and not m.group("frac") else many
    # the unit's full stop stays where it also ends the sentence
    keep = dot and (not rest.strip() or _capitalised(rest.lstrip()))
    return f"{number} {said}" + ("." if keep else "")


def _hyphen_range(m: re.Match, text: str) -> str:
    """"pages 5-10", "1914-1918", "1914-18": the hyphen reads "to"; else ("555-1234", a score "3-2") kept."""
    a, b = m.group("a"), m.group("b")
    prev = _prev_word(text, m.start()).lower().rstrip(".,:")
    years = len(a) == 4 and 1100 <= int(a) <= 2099 and (
        (len(b) == 4 and int(b) > int(a)) or (len(b) == 2 and int(b) > int(a[2:])))
    if prev in _RANGE_KEYWORDS or years:
        return f"{a} to {b}"
    return m.group(0)


def is_scene_break(text: str) -> bool:
    """A paragraph that is only a scene-break marker ("* * *", "***", "⁂", "~~~", "#"): it is a pause,
    nothing in it is said."""
    marks = "".join(text.split())
    if not marks or any(c not in _BREAK_CHARS for c in marks):
        return False
    return len(marks) >= 2 or marks in "*⁂✻✱✳❧☙#"


def _sub(rx: re.Pattern, fn, text: str) -> str:
    """``rx.sub`` whose replacement function also sees the whole text."""
    return rx.sub(lambda m: fn(m, text), text)


def _normalize_plain(text: str, heading: bool) -> str:
    t = _FOOTREF_RE.sub("", text)
    t = _URL_RE.sub(lambda m: _spell_url(m.group(0)), t)
    t = _EMAIL_RE.sub(lambda m: _spell_url(m.group(0)), t)
    t = _ASTERISKS_RE.sub(lambda m: " " if 0 < m.start() and m.end() < len(t) else "", t)
    t = _sub(_DEGREE_TITLE_RE, _degree_title, t)
    t = _sub(_LATIN_RE, _latin, t)
    t = _sub(_TIME_RE, _time, t)
    t = _sub(_HOUR_AMPM_RE, _hour_ampm, t)
    t = _sub(_STOP_ABBR_RE, _abbr, t)
    t = _sub(_SAINT_RE, _saint, t)
    t = _CURRENCY_RE.sub(_currency, t)
    t = _PERCENT_RE.sub(lambda m: _cardinal_text(*(m.group("num").split(".") + [None])[:2]) + " percent", t)
    t = _DATE_NUM_RE.sub(_numeric_date, t)
    t = _FRACTION_RE.sub(_fraction, t)
    t = _sub(_VULGAR_RE, _vulgar, t)
    t = _DEGREE_RE.sub(_degrees, t)
    t = _NUMBER_ABBR_RE.sub(_number_abbr, t)
    t = _KEYWORD_ABBR_RE.sub(_keyword_abbr, t)
    t = _sub(_UNIT_RE, _unit, t)
    t = _DATE_ISO_RE.sub(_iso_date, t)
    t = _DAY_RANGE_DMY_RE.sub(lambda m: _day_range(m, False), t)
    t = _DAY_RANGE_MDY_RE.sub(lambda m: _day_range(m, True), t)
    t = _DATE_MDY_RE.sub(_mdy, t)
    t = _DATE_DMY_RE.sub(_dmy, t)
    t = _DECADE_RE.sub(_decade, t)
    t = _ORDINAL_RE.sub(_ordinal, t)
    t = _RANGE_RE.sub(" to ", t)
    t = _sub(_HYPHEN_RANGE_RE, _hyphen_range, t)
    t = _sub(_NUMBER_RE, _number, t)
    t = _ROMAN_TOKEN_RE.sub(lambda m: _roman(m, t, heading), t)
    t = _sub(_INITIALISM_RE, _initialism, t)
    t = _LETTER_PAIR_RE.sub(_letter_pair, t)
    t = _sub(_LONE_A_RE, _lone_a, t)
    t = t.replace("&", " and ")
    t = _DASH_RE.sub(", ", t)
    t = _ELLIPSIS_RE.sub(lambda m: (", " if m.end() < len(t) and t[m.end():].strip() else "."), t)
    t = re.sub(r",\s*([,.;:!?])", r"\1", t)  # a pause next to other punctuation: keep the other
    t = re.sub(r"([,.;:!?])\s*,(?=\s|$)", r"\1", t)
    t = re.sub(r",\s+([\"'”’»)\]])", r",\1", t)  # "I think—”": the pause stays with the word
    t = re.sub(r"^\s*,\s*", "", t)
    t = re.sub(r"([(\[\"“‘])\s*,\s*", r"\1", t)
    return _SPACES_RE.sub(" ", t).strip()


_HOLD = "\ue000"  # stands for a [[ phonemes ]] block while the text around it is normalised


def normalize(text: str, heading: bool = False) -> str:
    """The spoken form of ``text`` (one utterance, or a chapter title with ``heading=True``)."""
    if "[[" not in text:
        return _normalize_plain(text, heading)
    blocks: list[str] = []
    held = []
    for is_ph, part in split_phoneme_blocks(text.replace(_HOLD, "")):
        if is_ph:
            blocks.append(part)
            held.append(f" {_HOLD} ")
        else:
            held.append(part)
    out = _normalize_plain("".join(held), heading)
    pieces = out.split(_HOLD)
    joined = "".join(p + (blocks[k] if k < len(blocks) else "") for k, p in enumerate(pieces))
    return re.sub(r"\]\]\s+([.,;:!?])", r"]]\1", _SPACES_RE.sub(" ", joined)).strip()
