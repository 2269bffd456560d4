"""One module per page (or group of pages): each reads through ``data.Source`` and
renders one template. Routes are listed in ``dashboard.app``."""
