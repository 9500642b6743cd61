"""``python -m redline.engine.sim``: run the simulated inference server."""

from .serve import main

if __name__ == "__main__":
    raise SystemExit(main())
