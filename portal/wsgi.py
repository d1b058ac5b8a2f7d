import os

from django.core.wsgi import get_wsgi_application

from portal.middleware import CharsetGuard

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# CharsetGuard answers a request with an undecodable charset before Django builds it (a 500 there).
application = CharsetGuard(get_wsgi_application())
