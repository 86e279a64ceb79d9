"""Repository scripts: they read and write the checkout, so they are not part of the package."""
