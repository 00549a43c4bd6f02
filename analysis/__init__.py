"""Offline analysis beside the product: the mock engine and recorded graph (``mocks``,
``recorded``), the rules (``rules``), the deploy-order model (``deploy_order``, ``create_times``),
the plan (``planning``, ``plan``) and the diagram. It reads what the program registers; the
program never imports it."""
