"""The web console (``strom ui``): a Flask application over the public AdminClient and a consumer."""
