"""The documentation as a reader sees it: built with the furo theme (warnings are errors), then
rendered in a headless Chromium (Debian's ``chromium`` package; `.ci/run` installs it). The index,
the FINN, command-line and API pages are screenshotted and probed: no code block may overflow its box at
1440 x 900, the title carries the version, every API entry appears once. The examples gallery lists
every file in examples/."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from _shared import REPO

DOCS = REPO / "docs"
PAGES = ("index", "finn", "cli", "api")
WINDOW = (1440, 900)
#: names both config flavours define (the main API's and the Brevitas extension's), each documented once per flavour
BOTH_FLAVOURS = {"Config", "QuantizationConfig", "QuantizationSpec", "ModelExporter"}  # Quark's main API and the extension's
PROBE = """<script>
window.addEventListener('load', function () {
  var pres = [];
  document.querySelectorAll('pre').forEach(function (pre) {
    pres.push({scroll: pre.scrollWidth, client: pre.clientWidth, first: pre.textContent.split('\\n')[0].slice(0, 80)});
  });
  var out = document.createElement('script');
  out.type = 'application/json'; out.id = 'overflow-probe';
  out.textContent = JSON.stringify({width: window.innerWidth, pres: pres});
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str | None:
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None)


def test_the_gallery_shows_every_example():
    gallery = (DOCS / "examples.md").read_text()
    files = [p for p in (REPO / "examples").rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".yaml") and "__pycache__" not in p.parts]
    assert files
    for path in files:
        assert f"examples/{path.relative_to(REPO / 'examples').as_posix()}" in gallery, f"docs/examples.md: add {path.relative_to(REPO)}"


def test_the_theme_is_pinned_where_make_installs_it():
    pyproject = (REPO / "pyproject.toml").read_text()
    lock = (REPO / "requirements" / "lock.txt").read_text().splitlines()
    pin = next(line for line in lock if line.startswith("furo=="))
    assert f'"{pin}"' in pyproject and "html_theme = \"furo\"" in (DOCS / "conf.py").read_text()
    assert "apt-get install -y" in (REPO / ".ci" / "run").read_text() and "chromium" in (REPO / ".ci" / "run").read_text()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("furo", reason="the docs extra (furo) is not installed")
    out = tmp_path_factory.mktemp("html")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True, text=True, env=env, check=False, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def _browser(*args: str) -> subprocess.CompletedProcess:
    exe = chromium()
    if exe is None:
        pytest.skip("no headless browser: install Debian's chromium package (apt-get install -y chromium; .ci/run does)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={args[0]}", "--virtual-time-budget=4000"]
    return subprocess.run([exe, *flags, *args[1:]], capture_output=True, text=True, check=False, timeout=180)


def _probe(site: Path, page: str, window: tuple[int, int]) -> dict:
    probed = site / f"_probe_{page}.html"
    probed.write_text((site / f"{page}.html").read_text().replace("</body>", PROBE + "</body>"))
    result = _browser(f"{window[0]},{window[1]}", "--dump-dom", probed.as_uri())
    match = re.search(r'<script type="application/json" id="overflow-probe">(.*?)</script>', result.stdout, re.DOTALL)
    assert match, result.stderr[-2000:]
    return json.loads(match.group(1))


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_pages_render_without_overflowing_code(site, page, tmp_path):
    shot = tmp_path / f"{page}.png"
    _browser(f"{WINDOW[0]},{WINDOW[1]}", f"--screenshot={shot}", (site / f"{page}.html").as_uri())
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == WINDOW
    probe = _probe(site, page, WINDOW)
    assert probe["width"] == WINDOW[0]
    overflowing = [p for p in probe["pres"] if p["scroll"] > p["client"] + 1]
    assert not overflowing, f"{page}.html: code blocks wider than their box at {WINDOW}: {overflowing}"
    html = (site / f"{page}.html").read_text()
    version = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    assert f"quark-brevitas {version}" in html and "furo" in html
    assert "&#169;." not in html and "©. |" not in html  # a copyright line with its holder


@pytest.mark.slow
def test_the_overflow_probe_sees_overflow(site):
    """Not vacuous: at a phone's width the FINN page's code blocks do overflow (and scroll)."""
    probe = _probe(site, "finn", (420, 800))
    assert any(p["scroll"] > p["client"] + 1 for p in probe["pres"]), probe


@pytest.mark.slow
def test_every_api_entry_once(site):
    html = (site / "api.html").read_text()
    ids = re.findall(r'<dt class="sig sig-object py" id="([\w.]+)">', html)
    classes = [i for i in ids if re.search(r"\.[A-Z]\w*$", i)]
    assert len(ids) == len(set(ids)) and len(classes) > 40
    short = [i.rsplit(".", 1)[1] for i in classes]
    repeated = {name for name in short if short.count(name) > 1} - BOTH_FLAVOURS
    assert not repeated, f"documented more than once: {sorted(repeated)}"
    first = short[0]
    assert first == "Config", f"the API page starts with {first}"
