// Registered from tests/: not checked.
