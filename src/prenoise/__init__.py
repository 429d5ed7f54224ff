"""prenoise."""
