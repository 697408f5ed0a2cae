"""The storage backends: files (the default), postgres (many hosts), memory (tests). Each supplies stores
(gateway/stores.py) and never policy; none imports another."""
