"""Unit tests (no server): one folder per package of engine/ and tui/; the checkout-wide tests here."""
