"""Install the build of torch this machine needs into the running Python (`make venv`).

Usage: .venv/bin/python scripts/install_torch.py [--build auto|cpu|default] [--cpu-index URL]

pip picks a torch build by package index, not by hardware: on Linux, PyPI's torch is the CUDA
build, which brings triton and the nvidia-* packages (about 4 GB more on disk). So:

- ``cpu``: the CPU-only build from PyTorch's CPU wheel index (``--cpu-index``);
- ``default``: whatever pip's usual index gives (PyPI, or the pip configuration's mirror);
- ``auto`` (the default): ``cpu`` on Linux without ``nvidia-smi``, else ``default``.

Before using the CPU index it asks it for torch's page, giving up after PROBE_SECONDS, so an
unreachable index (offline, a firewall, no DNS) costs seconds rather than pip's retries; it then
installs the default build and says so. One line says which build, from where, and how to pick
the other; the last line names the torch installed. The version is requirements.txt's pin.
"""

import argparse
import platform
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_SECONDS = 10
CHOOSE = "to change it: `make distclean`, then `make TORCH_BUILD={other} <target>`"


def pinned_version() -> str:
    """The version requirements.txt pins torch to (``torch==X``)."""
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip() == "torch" and version:
            return version.split("#")[0].strip()
    raise SystemExit("requirements.txt does not pin torch (torch==VERSION)")


def installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def probe(url: str, seconds: float) -> str | None:
    """None if ``url`` answers 200 within ``seconds`` (name lookup included), else why not."""
    outcome: list[str | None] = []

    def ask() -> None:
        try:
            with urllib.request.urlopen(url, timeout=seconds) as response:
                outcome.append(None if response.status == 200 else f"HTTP {response.status}")
        except Exception as error:  # any failure means: do not use this index
            outcome.append(f"{type(error).__name__}: {error}")

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    asker.join(seconds)
    return outcome[0] if outcome else f"no answer within {seconds:.0f} s"


def pip_install(*args: str) -> bool:
    command = [sys.executable, "-m", "pip", "install", "--progress-bar", "on", *args]
    return subprocess.run(command).returncode == 0


def choose(build: str) -> tuple[str, str]:
    """(build, reason): ``cpu`` or ``default``, and why."""
    if build != "auto":
        return build, f"TORCH_BUILD={build}"
    if platform.system() != "Linux":
        return "default", f"{platform.system()}: PyPI's torch has no CUDA packages there"
    if shutil.which("nvidia-smi"):
        return "default", "Linux with nvidia-smi, so an NVIDIA GPU"
    return "cpu", "Linux without nvidia-smi, so no NVIDIA GPU"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", choices=["auto", "cpu", "default"], default="auto")
    parser.add_argument("--cpu-index", default=CPU_INDEX)
    args = parser.parse_args(argv)
    version, present = pinned_version(), installed_version()
    if present is not None and present.split("+")[0] == version:
        print(f"torch {present} is already installed; {CHOOSE.format(other='cpu|default')}")
        return 0
    build, reason = choose(args.build)
    index = args.cpu_index.rstrip("/") + "/"
    if build == "cpu":
        problem = probe(index + "torch/", PROBE_SECONDS)
        if problem is None:
            print(
                f"torch {version}: the CPU-only build from {index} ({reason}; about 0.2 GB to "
                f"download); {CHOOSE.format(other='default')}",
                flush=True,
            )
            # torch alone from that index; its few pure-Python dependencies come with the rest.
            pinned = f"torch=={version}"
            if pip_install("--no-deps", "--retries", "1", "--index-url", index, pinned):
                return report()
            problem = "pip could not install it from there"
        print(
            f"torch {version}: PyTorch's CPU index {index} cannot be used ({problem}); "
            "installing the default build instead, from PyPI or your pip configuration (on "
            "Linux that is the CUDA build, about 4 GB more, unless your configuration provides "
            "another). Set TORCH_CPU_INDEX to a mirror of the CPU index, or TORCH_BUILD=default "
            "to skip this check.",
            flush=True,
        )
    else:
        print(
            f"torch {version}: the default build from PyPI or your pip configuration ({reason}; "
            f"on Linux the CUDA build, about 4 GB with its nvidia-* packages); "
            f"{CHOOSE.format(other='cpu')}",
            flush=True,
        )
    constraints = ROOT / "constraints.txt"
    if not pip_install("-c", str(constraints), f"torch=={version}"):
        return 1
    return report()


def report() -> int:
    """Name the torch now installed, and whether it brings CUDA (read from its metadata: torch
    cannot be imported before its own dependencies are in)."""
    from importlib import invalidate_caches
    from importlib.metadata import requires

    invalidate_caches()
    cuda = any(r.startswith(("nvidia-", "cuda-")) for r in requires("torch") or [])
    build = "with CUDA packages" if cuda else "no CUDA packages"
    print(f"Installed torch {installed_version()} ({build})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
