"""Invitations (portal.accounts): the platform admin's form and API, and the invitee's page where
they set their own password. Thin callers of `user_invite`."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import PasswordResetConfirmView
from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.urls import reverse_lazy
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.exceptions import DomainError
from core.models import audit
from core.throttles import WriteThrottle
from portal.accounts import invite_tokens, user_invite
from quotas.members import can_invite


class InviteSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    email = serializers.EmailField(max_length=254)
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")


class InvitationSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.EmailField()
    url = serializers.URLField(help_text="The one-time link; give it to the person (it is shown once).")
    expires = serializers.DateTimeField()


def _invite(request, data: dict) -> dict:
    user, path, expires = user_invite(actor=request.user, **data)
    return {"username": user.username, "email": user.email, "url": request.build_absolute_uri(path), "expires": expires}


class InvitationView(APIView):
    """Invite a person without the identity provider: a one-time link where they set their own
    password (platform admins)."""

    throttle_classes = [WriteThrottle]

    @extend_schema(request=InviteSerializer, responses={201: InvitationSerializer})
    def post(self, request):
        body = InviteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(
            InvitationSerializer(_invite(request, body.validated_data)).data, status=status.HTTP_201_CREATED
        )


class InviteForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(max_length=254)
    reason = forms.CharField(max_length=1000, required=False)


@login_required
def invite(request):
    """The platform admin's form; after it, the link, shown once."""
    if not can_invite(request.user):
        raise PermissionDenied("Only platform admins invite people.")
    # Prefilled from the members page's link for a person who has no account yet.
    initial = {name: request.GET[name][:254] for name in ("username", "email") if request.GET.get(name)}
    form = InviteForm(request.POST or None, initial=initial)
    invitation = None
    if request.method == "POST" and form.is_valid():
        try:
            invitation = _invite(request, dict(form.cleaned_data))
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
    return render(request, "platform/invite.html", {"form": form, "invitation": invitation})


class InviteAcceptView(PasswordResetConfirmView):
    """The invitee's page: Django's password-reset confirmation (the token moves from the URL to
    the session before the form shows, so it never leaks in a Referer), with invitation tokens."""

    token_generator = invite_tokens
    template_name = "registration/invite_accept.html"
    success_url = reverse_lazy("login")

    def get_user(self, uidb64):
        user = super().get_user(uidb64)
        return user if user is not None and user.is_active else None  # a deactivated invitee: no link

    def form_valid(self, form):
        response = super().form_valid(form)
        audit(actor=form.user, action="user.invite_accept", obj=form.user, changes={"user": form.user.username})
        return response
