"""The predictor's calibration grid, importable without the numerics (the CLI's parser
reads it for its defaults; ``pkps --help`` then starts without scikit-learn)."""

PROFILE_BUDGETS = (1, 2, 4, 8, 16, 32)
MODES = ("scored", "responses-only")
