"""A virtualenv that sees the packages of the interpreter that makes it, whatever that interpreter is: the system's, or
a virtualenv's own (stdlib only, so that a test can run it under any interpreter)."""
from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path


def venv_seeing_this_python(folder: Path) -> Path:
    """A new venv in `folder`, with pip, that imports its own packages first, then this interpreter's; returns its
    python. (`venv --system-site-packages` sees the base interpreter's packages: from inside a venv, not that venv's.)"""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    inner = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           check=True, capture_output=True, text=True).stdout.strip()
    seen = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if Path(p).is_dir()]
    # plain paths: their own .pth files stay unread, so an editable sumrl there cannot shadow the installed one
    (Path(inner) / "_outer_site_packages.pth").write_text("".join(f"{p}\n" for p in seen), encoding="utf-8")
    return python
