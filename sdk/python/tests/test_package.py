"""The package as users get it: installed with pip offline next to Debian's psycopg, typed, one version."""

import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SDK = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ROOT = os.path.abspath(os.path.join(SDK, "..", ".."))
sys.path.insert(0, SDK)

import simpleworkflow  # noqa: E402

# Run by the installed interpreter, away from the source tree (-I: no
# PYTHONPATH, no current directory on sys.path).
_PROBE = r"""
import importlib.metadata as md, json, os, simpleworkflow
dist = md.distribution("simpleworkflow")
print(json.dumps({
    "version": simpleworkflow.__version__,
    "dist_version": dist.version,
    "file": simpleworkflow.__file__,
    "typed": os.path.isfile(os.path.join(os.path.dirname(simpleworkflow.__file__), "py.typed")),
    "requires": dist.requires or [],
    "exported": sorted(n for n in simpleworkflow.__all__ if hasattr(simpleworkflow, n)),
}))
"""


class PackageTest(unittest.TestCase):
    def test_pip_installs_offline_with_debians_psycopg(self):
        """pip install of sdk/python into a venv that sees the system's packages, without an index."""
        if importlib.util.find_spec("venv") is None:
            self.skipTest("the venv module is missing (Debian: apt-get install python3-venv)")
        with tempfile.TemporaryDirectory(prefix="sw-py-pkg-") as tmp:
            # A copy, so that the build leaves nothing in the source tree.
            src = os.path.join(tmp, "src")
            shutil.copytree(
                SDK, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests")
            )
            venv = os.path.join(tmp, "venv")
            made = subprocess.run(
                [sys.executable, "-m", "venv", "--system-site-packages", venv],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if made.returncode != 0 and "ensurepip" in made.stdout + made.stderr:
                self.skipTest(
                    "python3 -m venv cannot install pip here (Debian: apt-get install python3-venv): "
                    + (made.stdout + made.stderr).strip()
                )
            self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
            py = os.path.join(venv, "bin", "python")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
            env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
            pip = subprocess.run(
                [py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-cache-dir", src],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=tmp,
                env=env,
            )
            self.assertEqual(
                pip.returncode, 0, "pip install ./sdk/python offline failed:\n" + pip.stdout + pip.stderr
            )

            probe = subprocess.run(
                [py, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=60, cwd=tmp, env=env
            )
            self.assertEqual(probe.returncode, 0, probe.stderr)
            got = json.loads(probe.stdout)
            self.assertTrue(
                os.path.realpath(got["file"]).startswith(os.path.realpath(venv) + os.sep),
                f"imported {got['file']}, not the installed package",
            )
            self.assertEqual(
                got["version"],
                got["dist_version"],
                "simpleworkflow.__version__ differs from the installed distribution's version",
            )
            self.assertEqual(got["version"], simpleworkflow.__version__)
            self.assertTrue(got["typed"], "py.typed is not installed")
            self.assertEqual(
                [r for r in got["requires"] if not r.startswith("psycopg")],
                [],
                "the package depends on more than psycopg",
            )
            self.assertEqual(got["exported"], sorted(simpleworkflow.__all__))

    def test_version_is_written_once(self):
        """pyproject.toml reads simpleworkflow.__version__; it is the release's (the chart's appVersion)."""
        with open(os.path.join(SDK, "pyproject.toml"), encoding="utf-8") as f:
            pyproject = f.read()
        project = re.search(r"(?ms)^\[project\]\n(.*?)(?=^\[)", pyproject).group(1)
        self.assertIsNone(re.search(r"(?m)^version\s*=", project), "pyproject.toml sets a version of its own")
        self.assertRegex(project, r'(?m)^dynamic\s*=\s*\[[^\]]*"version"')
        self.assertRegex(pyproject, r'(?m)^version\s*=\s*\{\s*attr\s*=\s*"simpleworkflow\.__version__"\s*\}')
        with open(os.path.join(ROOT, "charts", "simple-workflow", "Chart.yaml"), encoding="utf-8") as f:
            app = re.search(r'(?m)^appVersion:\s*"?v?([^"\s]+)"?\s*$', f.read()).group(1)
        self.assertEqual(
            simpleworkflow.__version__,
            app,
            "simpleworkflow.__version__ is not the release's version (charts/simple-workflow appVersion)",
        )

    def test_public_api_is_annotated(self):
        """Every public function and method takes and returns annotated types."""
        missing = []

        def check(name, fn):
            sig = inspect.signature(fn)
            for p in sig.parameters.values():
                if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                    missing.append(f"{name}: parameter {p.name}")
            if sig.return_annotation is inspect.Signature.empty:
                missing.append(f"{name}: return")

        for name in simpleworkflow.__all__:
            obj = getattr(simpleworkflow, name)
            if inspect.isfunction(obj):
                check(name, obj)
            elif inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if isinstance(member, property):
                        member = member.fget
                    if inspect.isfunction(member) and member.__module__.startswith("simpleworkflow"):
                        check(f"{name}.{attr}", member)
        self.assertEqual(missing, [])

    def test_mypy_strict(self):
        """mypy --strict finds nothing in the package and the example worker."""
        if importlib.util.find_spec("mypy") is None:
            self.skipTest(
                "mypy is missing (Debian: apt-get install python3-mypy; hack/python-deps.sh installs it)"
            )
        with tempfile.TemporaryDirectory(prefix="sw-py-mypy-") as cache:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mypy",
                    "--strict",
                    "--cache-dir",
                    cache,
                    os.path.join(SDK, "simpleworkflow"),
                    os.path.join(SDK, "examples", "example_worker.py"),
                ],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=SDK,
            )
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
