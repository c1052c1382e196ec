"""``python -m duet.api``: the ``duet`` command, for an environment whose scripts are not on PATH."""

from duet.api import main

if __name__ == "__main__":
    main()
