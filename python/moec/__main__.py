"""`python3 -m moec ...`: the moec command (moec._cli), for a build tree or
an environment whose scripts directory is not on PATH."""
import sys

from ._cli import main

sys.exit(main())
