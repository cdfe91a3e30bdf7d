"""The Python package as a user installs it (CTest install.pip and install.python).

    python3 test_python_install.py pip SOURCE_DIR WORK_DIR
        `pip install --target WORK_DIR/site SOURCE_DIR` (pyproject.toml: scikit-build-core builds
        the library with CMake). scikit-build-core is taken from this Python when it has it, else
        fetched from the package index into WORK_DIR/build-deps (kept for the next run); when it
        cannot be fetched the test is skipped (exit 77) with the reason.
    python3 test_python_install.py cmake BUILD_DIR WORK_DIR PYTHONDIR [CMAKE]
        `cmake --install BUILD_DIR --prefix WORK_DIR/prefix`; the package is in PYTHONDIR below it.

Then a fresh Python, in WORK_DIR (outside the source tree) with only the installed package on its
path and no FLASHATTN_LIBRARY or FA_PLUGIN_PATH, imports flashattn, checks that it loaded the
library installed with it and that fa_backend_info finds the cpu plugin there, and runs one
attention call against a float64 NumPy reference. Exit 77 (skipped) without pip or NumPy.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

SKIP = 77

# Run by the fresh interpreter: argv[1] is the directory the package must come from, argv[2] the
# install tree the library and its plugin must come from.
CHECK = r"""
import os, sys
site = os.path.realpath(sys.argv[1])
root = os.path.realpath(sys.argv[2])
import flashattn
from flashattn import _capi
pkg = os.path.realpath(os.path.dirname(flashattn.__file__))
assert pkg.startswith(site + os.sep), f"flashattn imported from {pkg}, not from {site}"
lib = os.path.realpath(_capi.find_library())
assert lib.startswith(root + os.sep), f"library {lib} is not the one installed under {root}"
cpu = [b for b in flashattn.backend_info() if b.name == "cpu"][0]
assert cpu.available, f"cpu backend unavailable: {cpu.reason}"
plugin = os.path.realpath(cpu.plugin_path)
assert plugin.startswith(root + os.sep), f"cpu plugin {plugin} is not under {root}"
import numpy as np
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 64, 2, 32)).astype(np.float32) for _ in range(3))
out, lse = flashattn.attention(q, k, v, causal=True, return_lse=True)
s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(32)
s = np.where(np.tril(np.ones((64, 64), bool)), s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True))
ref = np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
err = float(np.abs(out - ref).max())
assert err < 1e-4, f"attention differs from the float64 reference by {err}"
print(f"flashattn from {pkg}; library {lib}; cpu plugin {plugin}; max error {err:.2e}")
"""


def run(args: list[str], what: str, env: dict | None = None, cwd: str | None = None,
        timeout: int = 900) -> subprocess.CompletedProcess:
    print("+ " + " ".join("<the check>" if a == CHECK else a for a in args), flush=True)
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if r.returncode != 0:
        print(r.stdout[-6000:] + r.stderr[-6000:])
        print(f"FAIL ({what}): exit {r.returncode}")
        sys.exit(1)
    return r


def clean_env() -> dict:
    env = dict(os.environ)
    for v in ("FLASHATTN_LIBRARY", "FA_PLUGIN_PATH", "PYTHONPATH", "LD_LIBRARY_PATH"):
        env.pop(v, None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def build_backend(work: str, env: dict) -> str | None:
    """A PYTHONPATH entry that provides scikit-build-core ("" when this Python has it), or None
    (after printing why) when it cannot be had."""
    if importlib.util.find_spec("scikit_build_core"):
        return ""
    deps = os.path.join(work, "build-deps")
    probe = [sys.executable, "-c", "import scikit_build_core"]
    if subprocess.run(probe, env={**env, "PYTHONPATH": deps}, capture_output=True).returncode == 0:
        return deps
    shutil.rmtree(deps, ignore_errors=True)
    args = [sys.executable, "-m", "pip", "install", "--target", deps, "--timeout", "20",
            "--retries", "1", "scikit-build-core>=0.10"]
    print("+ " + " ".join(args), flush=True)
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
        print("skipped: scikit-build-core (the build backend of pyproject.toml) is not installed "
              "for " + sys.executable + " and could not be fetched from the package index: " +
              " | ".join(tail))
        return None
    return deps


def install_pip(src: str, work: str, env: dict) -> tuple[str, str]:
    deps = build_backend(work, env)
    if deps is None:
        sys.exit(SKIP)
    site = os.path.join(work, "site")
    shutil.rmtree(site, ignore_errors=True)
    pip_env = dict(env)
    if deps:
        pip_env["PYTHONPATH"] = deps
    pip_env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    # No build isolation: the build backend is the one found above, nothing else is fetched.
    run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
         "--target", site, "--config-settings", "build-dir=" + os.path.join(work, "build"), src],
        "pip install " + src, env=pip_env)
    return site, os.path.join(site, "flashattn")


def install_cmake(build: str, work: str, pythondir: str, cmake: str, env: dict) -> tuple[str, str]:
    prefix = os.path.join(work, "prefix")
    shutil.rmtree(prefix, ignore_errors=True)
    run([cmake, "--install", build, "--prefix", prefix], "cmake --install", env=env)
    return os.path.join(prefix, pythondir), prefix


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[1] not in ("pip", "cmake"):
        print(__doc__)
        return 2
    mode, tree, work = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    os.makedirs(work, exist_ok=True)
    env = clean_env()
    if importlib.util.find_spec("numpy") is None:
        print(f"skipped: NumPy is not installed for {sys.executable} (apt-get install "
              "python3-numpy): the attention call needs it")
        return SKIP
    if mode == "pip":
        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True,
                          env=env).returncode != 0:
            print(f"skipped: pip is not available for {sys.executable} (apt-get install "
                  "python3-pip)")
            return SKIP
        site, root = install_pip(tree, work, env)
    else:
        cmake = sys.argv[5] if len(sys.argv) > 5 else "cmake"
        site, root = install_cmake(tree, work, sys.argv[4], cmake, env)
    env["PYTHONPATH"] = site
    r = run([sys.executable, "-s", "-c", CHECK, site, root],
            "import and call the installed package", env=env, cwd=work, timeout=300)
    print(r.stdout.strip())
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
