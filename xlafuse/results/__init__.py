"""Result records: one per measured cell, and the results.jsonl files that hold them."""
