"""`python -m bench`; kept bare because spawned client processes re-import it."""

import sys

if __name__ == "__main__":
    from bench.cli import main

    sys.exit(main())
