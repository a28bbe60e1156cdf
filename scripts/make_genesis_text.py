"""Regenerate data/genesis_kjv.txt: the Book of Genesis (King James Version), one verse a line.

Needs Debian's ``bible-kjv`` and ``bible-kjv-text`` packages (``apt-get install bible-kjv
bible-kjv-text``), whose ``bible`` program prints the text. Chapter headings, blank lines and
verse numbers are dropped; each verse becomes one line of plain ASCII text.

    python scripts/make_genesis_text.py
"""

import re
import subprocess
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent.parent / "data" / "genesis_kjv.txt"
VERSE = re.compile(r"^\s*\d+ (.+)$")  # "  12 And God said, ..." -> "And God said, ..."


def genesis_verses() -> list[str]:
    """Every verse of Genesis 1:1 to 50:26, without its number, in order."""
    printed = subprocess.run(
        ["bible", "-l0", "gen1:1-gen50:26"], capture_output=True, text=True, check=True
    ).stdout
    matches = (VERSE.match(line) for line in printed.splitlines())
    verses = [match.group(1).strip() for match in matches if match]
    if len(verses) != 1533:  # Genesis has 1,533 verses in the KJV
        raise RuntimeError(f"expected 1533 verses of Genesis, got {len(verses)}")
    return verses


def main() -> None:
    text = "\n".join(genesis_verses()) + "\n"
    text.encode("ascii")  # fails loudly if the package ever ships non-ASCII characters
    OUTPUT.write_text(text, encoding="ascii")
    print(f"wrote {OUTPUT} ({len(text)} characters, {len(set(text))} distinct)")


if __name__ == "__main__":
    main()
