"""pkps_core: Product Kernel Perspective Space (PKPS) and DKPS for benchmark prediction.

The numerics and data library behind Perspective Explorer. It never imports streamlit.
"""

__version__ = "0.1.0"
