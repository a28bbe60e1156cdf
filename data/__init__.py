"""The data shipped with the book, installed as the package ``attnbook.data``: see README.md."""
