"""Every file of the package in the checkout (code, SQL, templates, static, py.typed) is in the wheel
and in the sdist of dist/ (.ci/run builds them first)."""

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

tracked = subprocess.run(["git", "ls-files", "awa_django"], capture_output=True, text=True, check=True).stdout.split()
wanted = {path for path in tracked if not path.endswith(".pyc")}
wheel = next(Path("dist").glob("*.whl"))
sdist = next(Path("dist").glob("*.tar.gz"))
in_wheel = set(zipfile.ZipFile(wheel).namelist())
with tarfile.open(sdist) as tar:
    in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
missing = {"wheel": sorted(wanted - in_wheel), "sdist": sorted(wanted - in_sdist)}
kinds = {suffix: sum(path.endswith(suffix) for path in wanted) for suffix in (".sql", ".html", ".css", ".js")}
if any(missing.values()):
    sys.exit(f"ci: files missing from the package: {missing}")
print(f"{wheel.name} and {sdist.name}: all {len(wanted)} package files ({kinds})")
