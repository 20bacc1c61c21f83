"""Arrow Flight SQL front end (grpclib under trio-asyncio): see server.py and service.py."""
