"""Every user-facing validation message names the field and states the allowed range or set
(issue 9, last acceptance criterion). ``test_audit.py`` holds the audit table."""
