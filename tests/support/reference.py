"""The reference packages of a test, or a loud skip -- or a failure where the suite needs them.

    sys.path.insert(0, <tests/support>)
    import reference
    reference.require("torch", "transformers")      # before importing them

Each name must be installed at the version tests/requirements.txt pins, and the module
Python imports must be that installed distribution's own file (a stand-in package earlier
on PYTHONPATH is refused). When something is missing or wrong the test exits 77
(skipped), with a banner -- unless the references are required: under CI (CI=true) or
tools/test.sh (MG_REQUIRE_REFERENCES=1, set once tools/install-deps.sh has installed the
pins), where the test exits 1. A reference check that can skip silently is no check.
"""
import importlib
import importlib.metadata
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(_HERE, "..", "requirements.txt")
# distribution name -> the module it provides, where they differ
_MODULE = {}


def pins():
    """{distribution: version} from tests/requirements.txt."""
    out = {}
    with open(REQUIREMENTS) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, _, version = line.partition("==")
                out[name.strip().lower()] = version.strip()
    return out


def required():
    return os.environ.get("CI") == "true" or os.environ.get("MG_REQUIRE_REFERENCES") == "1"


def problem(name):
    """None when `name` is installed at its pin and imports from its own distribution;
    otherwise why not."""
    want = pins().get(name.lower())
    if want is None:
        return f"{name} is not pinned in tests/requirements.txt"
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return f"{name} is not installed (want {want})"
    if have.split("+", 1)[0] != want:
        return f"{name} {have} is installed, tests/requirements.txt pins {want}"
    modname = _MODULE.get(name, name)
    try:
        mod = importlib.import_module(modname)
    except Exception as e:  # noqa: BLE001 -- any failure to import is the reason
        return f"import {modname} failed: {type(e).__name__}: {e}"
    path = os.path.realpath(getattr(mod, "__file__", None) or "")
    dist = importlib.metadata.distribution(name)
    own = os.path.realpath(str(dist.locate_file(os.path.join(modname, "__init__.py"))))
    if path != own:
        return f"import {modname} found {path or 'a namespace package'}, not the installed {name}'s {own}"
    return None


def require(*names):
    bad = [p for p in (problem(n) for n in names) if p]
    if not bad:
        return
    test = os.path.basename(sys.argv[0])
    lines = [f"{test}: the reference packages are missing or not the pinned ones:"] + ["  " + b for b in bad]
    if required():
        why = "CI=true" if os.environ.get("CI") == "true" else "MG_REQUIRE_REFERENCES=1 (tools/test.sh)"
        print("=" * 78 + "\nFAIL: " + "\n".join(lines) + f"\nthe references are required here ({why}); "
              "tools/install-deps.sh installs tests/requirements.txt\n" + "=" * 78, flush=True)
        sys.exit(1)
    print("=" * 78 + "\nSKIPPED: " + "\n".join(lines) + "\ntools/install-deps.sh installs tests/requirements.txt\n" +
          "=" * 78, flush=True)
    sys.exit(77)
