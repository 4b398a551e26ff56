"""Offline stand-in for the get-pip.py bootstrap script that ansible-test downloads.

ansible-test's ``--venv`` bootstrap fetches get-pip.py from a host this
machine cannot reach.  It looks in ``~/.ansible/test/cache/get_pip_<ver>.py``
first, so ``tests/tools/run-sanity.sh`` copies this file there.  Like the real
script, it is run inside the new virtual environment with pip-install
arguments (``--disable-pip-version-check pip==24.2 --no-setuptools
--no-wheel``): it seeds pip from the interpreter's own ``ensurepip`` wheel,
then lets that pip install the requested version from the configured index.
"""
import subprocess
import sys

# get-pip.py options that `pip install` itself does not know.
GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")


def main():
    pip_args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"],
                          stdout=subprocess.DEVNULL)
    return subprocess.call([sys.executable, "-m", "pip", "install", "--quiet"] + pip_args)


if __name__ == "__main__":
    sys.exit(main())
