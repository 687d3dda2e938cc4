"""The master and minion daemons: process plumbing (``runner``), the acceptance policy
(``policy``) and what the flow behaviours do (``service``)."""
