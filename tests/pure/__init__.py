"""No database and no process of rowfleet's: pure rules, parsers and the tools' checks, against captured outputs and fakes at the machine's edge."""
