"""``python -m leasehold --version``: the package's version."""

import argparse

from . import __version__


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m leasehold")
    parser.add_argument("--version", action="version", version=f"leasehold {__version__}")
    parser.parse_args()
    parser.print_help()


if __name__ == "__main__":
    main()
