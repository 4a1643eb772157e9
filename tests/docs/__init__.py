"""What a reader runs: the README's and the site's commands as written, the demo, the scenarios, the built archive and the wheel."""
