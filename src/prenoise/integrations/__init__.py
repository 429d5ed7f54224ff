"""Integrations of prenoise with third-party pipelines (imported only on demand; the core never
imports this package)."""
