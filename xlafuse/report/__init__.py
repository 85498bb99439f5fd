"""Reports: markdown, plots and text tables; the only layer that formats."""
