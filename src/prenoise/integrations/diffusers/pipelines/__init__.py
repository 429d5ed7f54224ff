"""One plan module per diffusers pipeline family: the ordered `randn_tensor` calls of a call."""
