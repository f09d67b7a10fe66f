"""PersonalFinance tools: a household's accounts, transactions, transfers, payees, payments,
scheduled payments, budgets, cards and disputes.  Money is EUR rounded to 2 decimals.

Every write raises :class:`ToolError` before it mutates anything; a write that succeeds always
changes the state.  The clock is ``state.now`` (never the wall clock); ids come from counters.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gym_envfactory import ToolError, tool

from .state import (
    Account,
    Budget,
    Card,
    Category,
    Dispute,
    FinanceDB,
    Payee,
    Payment,
    ScheduledPayment,
    Transaction,
    Transfer,
)

# ----------------------------------------------------------------------------- result models


class AccountSummary(BaseModel):
    account_id: str
    name: str
    type: str
    owner_ids: list[str]
    currency: str
    iban: str | None
    balance: float
    available_balance: float
    credit_limit: float | None = None
    card_ids: list[str]


class AccountBalance(BaseModel):
    account_id: str
    name: str
    type: str
    currency: str
    balance: float
    pending_total: float
    available_balance: float
    credit_limit: float | None = None
    available_credit: float | None = None
    daily_outgoing_limit: float | None = None
    outgoing_today: float


class TransactionSearchResult(BaseModel):
    total_matches: int
    returned: int
    transactions: list[Transaction]


class TransferReceipt(BaseModel):
    transfer: Transfer
    from_balance: float
    to_balance: float


class PaymentReceipt(BaseModel):
    payment: Payment
    from_account_balance: float


class BudgetLine(BaseModel):
    category: str
    monthly_limit: float
    spent: float
    remaining: float
    percent_used: float
    over_budget: bool


class BudgetStatus(BaseModel):
    month: str
    lines: list[BudgetLine]
    total_limit: float
    total_spent: float


class BudgetChange(BaseModel):
    category: str
    previous_limit: float | None
    monthly_limit: float


class SpendingSummary(BaseModel):
    month: str
    account_id: str | None
    total_spent: float
    total_income: float
    net: float
    transaction_count: int
    by_category: dict[str, float]


class CardReplacement(BaseModel):
    lost_card: Card
    replacement_card: Card


class RecategorizeResult(BaseModel):
    transaction_id: str
    previous_category: str
    category: str


# ----------------------------------------------------------------------------- helpers

_SPEND_KINDS = ("card_purchase", "refund", "direct_debit", "fee", "payment")
_INCOME_KINDS = ("deposit", "interest")
_OUT_KINDS = ("transfer_out", "payment")
_IBAN_RE = re.compile(r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$")
_MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")

AccountId = Annotated[str, Field(description="Account id, e.g. ACC-1001 (see list_accounts)")]
Amount = Annotated[float, Field(description="Amount in EUR, greater than 0, at most 2 decimals")]


def _today(state: FinanceDB) -> date:
    return state.now.date()


def _money(x: float) -> float:
    return round(x + 0.0, 2)


def _check_amount(amount: float) -> float:
    if amount <= 0:
        raise ToolError(f"Amount must be greater than 0, got {amount}", code="invalid_amount")
    if abs(amount * 100 - round(amount * 100)) > 1e-6:
        raise ToolError(f"Amount {amount} has more than 2 decimals; give cents at most (e.g. 12.34)",
                        code="invalid_amount")
    return _money(amount)


def _account(state: FinanceDB, account_id: str) -> Account:
    acc = state.accounts.get(account_id)
    if acc is None:
        raise ToolError(f"No account {account_id}; account ids look like ACC-1001 (use list_accounts)",
                        code="not_found")
    if acc.status != "open":
        raise ToolError(f"Account {account_id} is closed", code="invalid_state")
    return acc


def _customer(state: FinanceDB, customer_id: str) -> None:
    if customer_id not in state.customers:
        known = ", ".join(state.customers)
        raise ToolError(f"No customer {customer_id}; customers of this household: {known}", code="not_found")


def _payee(state: FinanceDB, payee_id: str) -> Payee:
    p = state.payees.get(payee_id)
    if p is None:
        raise ToolError(f"No payee {payee_id}; payee ids look like PY-0001 (use list_payees)", code="not_found")
    return p


def _card(state: FinanceDB, card_id: str) -> Card:
    c = state.cards.get(card_id)
    if c is None:
        raise ToolError(f"No card {card_id}; card ids look like CARD-5001 (use list_cards)", code="not_found")
    return c


def _transaction(state: FinanceDB, transaction_id: str) -> Transaction:
    t = state.transactions.get(transaction_id)
    if t is None:
        raise ToolError(f"No transaction {transaction_id}; ids look like TX-000123 (use search_transactions)",
                        code="not_found")
    return t


def _pending_total(state: FinanceDB, account_id: str) -> float:
    return _money(sum(t.amount for t in state.transactions.values()
                      if t.account_id == account_id and t.status == "pending"))


def _outgoing_today(state: FinanceDB, account_id: str) -> float:
    today = _today(state)
    return _money(-sum(t.amount for t in state.transactions.values()
                       if t.account_id == account_id and t.date == today and t.kind in _OUT_KINDS))


def _available(state: FinanceDB, acc: Account) -> float:
    avail = acc.balance + _pending_total(state, acc.account_id)
    if acc.type == "credit_card":
        avail += acc.credit_limit or 0.0
    return _money(avail)


def _check_outgoing(state: FinanceDB, acc: Account, amount: float) -> None:
    """Raise insufficient_funds / limit_exceeded for money leaving ``acc`` today."""
    avail = _available(state, acc)
    if acc.type == "credit_card":
        if amount > avail + 1e-9:
            raise ToolError(
                f"Credit limit exceeded on {acc.account_id}: available credit is {avail:.2f} EUR "
                f"(limit {acc.credit_limit:.2f}), requested {amount:.2f}", code="limit_exceeded")
    elif amount > avail + 1e-9:
        raise ToolError(
            f"Insufficient funds in {acc.account_id}: available balance is {avail:.2f} EUR, "
            f"requested {amount:.2f}", code="insufficient_funds")
    if acc.daily_outgoing_limit is not None:
        used = _outgoing_today(state, acc.account_id)
        if used + amount > acc.daily_outgoing_limit + 1e-9:
            left = _money(max(acc.daily_outgoing_limit - used, 0.0))
            raise ToolError(
                f"Daily outgoing limit of {acc.daily_outgoing_limit:.2f} EUR on {acc.account_id} would be "
                f"exceeded ({used:.2f} already sent today; at most {left:.2f} more today)",
                code="limit_exceeded")


def _new_tx(state: FinanceDB, **fields) -> Transaction:
    tx_id = f"TX-{state.next_tx_seq:06d}"
    state.next_tx_seq += 1
    tx = Transaction(transaction_id=tx_id, **fields)
    state.transactions[tx_id] = tx
    return tx


def _parse_month(month: str) -> tuple[date, date]:
    m = _MONTH_RE.match(month.strip())
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ToolError(f"Month must look like 2026-11 (YYYY-MM), got {month!r}", code="invalid_date")
    y, mo = int(m.group(1)), int(m.group(2))
    return date(y, mo, 1), date(y, mo, calendar.monthrange(y, mo)[1])


def _add_month(d: date, anchor_day: int) -> date:
    y, m = (d.year + 1, 1) if d.month == 12 else (d.year, d.month + 1)
    return date(y, m, min(anchor_day, calendar.monthrange(y, m)[1]))


def _spend_by_category(state: FinanceDB, first: date, last: date, account_id: str | None) -> tuple[dict[str, float], float, int]:
    by: dict[str, float] = {}
    income = 0.0
    n = 0
    for t in state.transactions.values():
        if not first <= t.date <= last or (account_id and t.account_id != account_id):
            continue
        if t.kind in _SPEND_KINDS:
            by[t.category] = by.get(t.category, 0.0) - t.amount
            n += 1
        elif t.kind in _INCOME_KINDS:
            income += t.amount
            n += 1
    return {k: _money(v) for k, v in sorted(by.items())}, _money(income), n


# ----------------------------------------------------------------------------- accounts


@tool(read_only=True)
def list_accounts(
    state: FinanceDB,
    *,
    customer_id: Annotated[str | None, Field(description="Only accounts owned by this customer, e.g. CU-001; omit for the whole household")] = None,
) -> list[AccountSummary]:
    """List the household's bank accounts (checking, savings, credit card).

    Returns for each account: account_id, name, type, owner_ids, currency (EUR), iban, balance (negative on a
    credit card = amount owed), available_balance (balance plus pending transactions; for a credit card
    the available credit), credit_limit and the ids of its cards.
    Errors: not_found (unknown customer_id).
    """
    if customer_id is not None:
        _customer(state, customer_id)
    out = []
    for acc in state.accounts.values():
        if customer_id is not None and customer_id not in acc.owner_ids:
            continue
        out.append(AccountSummary(
            account_id=acc.account_id, name=acc.name, type=acc.type, owner_ids=acc.owner_ids,
            currency=acc.currency, iban=acc.iban, balance=acc.balance,
            available_balance=_available(state, acc), credit_limit=acc.credit_limit,
            card_ids=[c.card_id for c in state.cards.values() if c.account_id == acc.account_id]))
    return out


@tool(read_only=True)
def get_account_balance(state: FinanceDB, *, account_id: AccountId) -> AccountBalance:
    """Get the current balance of one account.

    Returns balance (posted), pending_total (sum of pending transactions, negative for money on hold),
    available_balance (balance + pending; for a credit card: the remaining available credit),
    credit_limit and available_credit for credit cards, the daily outgoing limit and how much has
    already been sent out today (transfers and payments).
    Errors: not_found (unknown account_id).
    """
    acc = _account(state, account_id)
    pending = _pending_total(state, account_id)
    return AccountBalance(
        account_id=acc.account_id, name=acc.name, type=acc.type, currency=acc.currency,
        balance=acc.balance, pending_total=pending, available_balance=_available(state, acc),
        credit_limit=acc.credit_limit,
        available_credit=_available(state, acc) if acc.type == "credit_card" else None,
        daily_outgoing_limit=acc.daily_outgoing_limit, outgoing_today=_outgoing_today(state, account_id))


@tool(read_only=True)
def search_transactions(
    state: FinanceDB,
    *,
    account_id: Annotated[str | None, Field(description="Only this account, e.g. ACC-1001")] = None,
    start_date: Annotated[date | None, Field(description="Earliest transaction date (inclusive), YYYY-MM-DD")] = None,
    end_date: Annotated[date | None, Field(description="Latest transaction date (inclusive), YYYY-MM-DD")] = None,
    merchant: Annotated[str | None, Field(description="Case-insensitive text contained in the merchant name or memo")] = None,
    category: Annotated[Category | None, Field(description="Only this spending category")] = None,
    status: Annotated[Literal["posted", "pending"] | None, Field(description="Only posted or only pending")] = None,
    min_amount: Annotated[float | None, Field(description="Minimum absolute amount in EUR")] = None,
    max_amount: Annotated[float | None, Field(description="Maximum absolute amount in EUR")] = None,
    limit: Annotated[int, Field(description="Maximum number of transactions returned (1-200)", ge=1, le=200)] = 50,
) -> TransactionSearchResult:
    """Search the household's transactions, newest first (by date, then id).

    Amounts are signed: negative = money out of the account, positive = money in. Returns
    total_matches, returned and the transactions (transaction_id, account_id, date, amount, merchant,
    category, kind, status posted/pending, card_id, dispute_id if disputed).
    Errors: not_found (unknown account_id), invalid_date (start_date after end_date).
    """
    if account_id is not None:
        _account(state, account_id)
    if start_date and end_date and start_date > end_date:
        raise ToolError(f"start_date {start_date} is after end_date {end_date}", code="invalid_date")
    needle = merchant.lower().strip() if merchant else None
    hits = []
    for t in state.transactions.values():
        if account_id is not None and t.account_id != account_id:
            continue
        if start_date and t.date < start_date or end_date and t.date > end_date:
            continue
        if needle and needle not in t.merchant.lower() and needle not in t.memo.lower():
            continue
        if category and t.category != category or status and t.status != status:
            continue
        if min_amount is not None and abs(t.amount) < min_amount - 1e-9:
            continue
        if max_amount is not None and abs(t.amount) > max_amount + 1e-9:
            continue
        hits.append(t)
    hits.sort(key=lambda t: (t.date, t.transaction_id), reverse=True)
    return TransactionSearchResult(total_matches=len(hits), returned=min(limit, len(hits)),
                                   transactions=hits[:limit])


@tool(idempotent=False)
def transfer_between_accounts(
    state: FinanceDB,
    *,
    from_account_id: Annotated[str, Field(description="Account the money leaves, e.g. ACC-1001")],
    to_account_id: Annotated[str, Field(description="Household account that receives it, e.g. ACC-2001; a credit card account here pays the card off")],
    amount: Amount,
    memo: Annotated[str, Field(description="Optional note shown on both transactions")] = "",
) -> TransferReceipt:
    """Move money between two of the household's own accounts, immediately (dated today).

    Paying off the credit card = transfer to the credit card account. Creates a transfer TR-xxxx and two
    posted transactions (transfer_out / transfer_in). Returns the transfer and both new balances.
    Errors: not_found (unknown account), invalid_amount (<= 0 or more than 2 decimals), invalid_state
    (same account twice, transfer out of a credit card, or paying more than the card owes),
    insufficient_funds (above the available balance), limit_exceeded (daily outgoing limit of the source
    account, transfers and payments together).
    """
    amount = _check_amount(amount)
    src = _account(state, from_account_id)
    dst = _account(state, to_account_id)
    if src.account_id == dst.account_id:
        raise ToolError("from_account_id and to_account_id are the same account", code="invalid_state")
    if src.type == "credit_card":
        raise ToolError(f"{src.account_id} is a credit card; cash transfers out of a credit card are not "
                        "allowed. Pay from a checking or savings account instead.", code="invalid_state")
    if dst.type == "credit_card" and amount > -dst.balance + 1e-9:
        raise ToolError(f"{dst.account_id} only owes {max(-dst.balance, 0):.2f} EUR; a card payment cannot "
                        "exceed the amount owed", code="invalid_state")
    _check_outgoing(state, src, amount)
    today = _today(state)
    tr_id = f"TR-{state.next_transfer_seq:04d}"
    state.next_transfer_seq += 1
    out_tx = _new_tx(state, account_id=src.account_id, date=today, amount=-amount,
                     merchant=f"Transfer to {dst.name}", category="transfers", kind="transfer_out",
                     memo=memo, transfer_id=tr_id)
    in_tx = _new_tx(state, account_id=dst.account_id, date=today, amount=amount,
                    merchant=f"Transfer from {src.name}", category="transfers", kind="transfer_in",
                    memo=memo, transfer_id=tr_id)
    src.balance = _money(src.balance - amount)
    dst.balance = _money(dst.balance + amount)
    tr = Transfer(transfer_id=tr_id, from_account_id=src.account_id, to_account_id=dst.account_id,
                  amount=amount, date=today, memo=memo, debit_transaction_id=out_tx.transaction_id,
                  credit_transaction_id=in_tx.transaction_id)
    state.transfers[tr_id] = tr
    return TransferReceipt(transfer=tr, from_balance=src.balance, to_balance=dst.balance)


# ----------------------------------------------------------------------------- payees & payments


@tool(read_only=True)
def list_payees(state: FinanceDB) -> list[Payee]:
    """List the household's saved payees (people and companies it pays).

    Returns payee_id (PY-0001), name, iban, reference (e.g. customer number) and default_category.
    Errors: none (an empty list when no payees are saved).
    """
    return list(state.payees.values())


@tool
def add_payee(
    state: FinanceDB,
    *,
    name: Annotated[str, Field(description="Payee name as it should appear, e.g. 'City Water Works'")],
    iban: Annotated[str, Field(description="Payee IBAN; spaces are ignored, e.g. DE89 3704 0044 0532 0130 00")],
    reference: Annotated[str, Field(description="Optional reference sent with every payment (customer or invoice number)")] = "",
    default_category: Annotated[Category, Field(description="Spending category used for payments to this payee")] = "other",
) -> Payee:
    """Save a new payee so that it can be paid with pay_payee or create_scheduled_payment.

    Returns the new payee with its id (PY-xxxx).
    Errors: invalid_iban (not an IBAN: 2 letters, 2 digits, 11-30 letters/digits), invalid_state (empty
    name), already_exists (a payee with this IBAN is already saved; use that payee_id).
    """
    clean = iban.replace(" ", "").upper()
    if not _IBAN_RE.match(clean):
        raise ToolError(f"{iban!r} is not a valid IBAN (e.g. DE89370400440532013000)", code="invalid_iban")
    if not name.strip():
        raise ToolError("Payee name must not be empty", code="invalid_state")
    for p in state.payees.values():
        if p.iban == clean:
            raise ToolError(f"Payee {p.payee_id} ({p.name}) already has IBAN {clean}", code="already_exists")
    pid = f"PY-{state.next_payee_seq:04d}"
    state.next_payee_seq += 1
    payee = Payee(payee_id=pid, name=name.strip(), iban=clean, reference=reference,
                  default_category=default_category)
    state.payees[pid] = payee
    return payee


@tool
def pay_payee(
    state: FinanceDB,
    *,
    from_account_id: Annotated[str, Field(description="Account to pay from (checking, savings or the credit card account)")],
    payee_id: Annotated[str, Field(description="Saved payee id, e.g. PY-0003 (see list_payees)")],
    amount: Amount,
    memo: Annotated[str, Field(description="Optional payment note / remittance text")] = "",
) -> PaymentReceipt:
    """Pay a saved payee now (instant transfer, dated today, posted immediately).

    Paying from the credit card account charges the first active card on that account. The payment
    counts toward the source account's daily outgoing limit. Returns the payment (PM-xxxx, with its
    transaction id) and the account's new balance.
    Errors: not_found (account or payee), invalid_amount (<= 0 or more than 2 decimals),
    insufficient_funds, limit_exceeded (daily outgoing limit, or credit limit on a credit card),
    card_frozen (every card on the credit card account is frozen: unfreeze one first), invalid_state
    (credit card account has no usable card).
    """
    amount = _check_amount(amount)
    acc = _account(state, from_account_id)
    payee = _payee(state, payee_id)
    card_id = None
    if acc.type == "credit_card":
        cards = [c for c in state.cards.values() if c.account_id == acc.account_id]
        active = [c for c in cards if c.status == "active"]
        if not active:
            frozen = [c.card_id for c in cards if c.status == "frozen"]
            if frozen:
                raise ToolError(f"All cards on {acc.account_id} are frozen ({', '.join(frozen)}); unfreeze a "
                                "card with unfreeze_card before paying with it", code="card_frozen")
            raise ToolError(f"{acc.account_id} has no usable card", code="invalid_state")
        card_id = active[0].card_id
    _check_outgoing(state, acc, amount)
    pm_id = f"PM-{state.next_payment_seq:04d}"
    state.next_payment_seq += 1
    tx = _new_tx(state, account_id=acc.account_id, date=_today(state), amount=-amount, merchant=payee.name,
                 category=payee.default_category, kind="payment", memo=memo, payment_id=pm_id, card_id=card_id)
    acc.balance = _money(acc.balance - amount)
    pm = Payment(payment_id=pm_id, from_account_id=acc.account_id, payee_id=payee.payee_id, amount=amount,
                 date=_today(state), memo=memo, transaction_id=tx.transaction_id, card_id=card_id)
    state.payments[pm_id] = pm
    return PaymentReceipt(payment=pm, from_account_balance=acc.balance)


# ----------------------------------------------------------------------------- scheduled payments


@tool(read_only=True)
def list_scheduled_payments(
    state: FinanceDB,
    *,
    status: Annotated[Literal["active", "cancelled", "completed"] | None, Field(description="Only this status; omit for all")] = None,
    account_id: Annotated[str | None, Field(description="Only those paid from this account")] = None,
) -> list[ScheduledPayment]:
    """List scheduled / recurring payments (standing orders).

    Returns scheduled_payment_id (SP-0001), from_account_id, payee_id, amount, frequency
    (once/weekly/monthly), next_date, end_date, status and skipped_dates.
    Errors: not_found (unknown account_id).
    """
    if account_id is not None:
        _account(state, account_id)
    return [s for s in state.scheduled_payments.values()
            if (status is None or s.status == status) and (account_id is None or s.from_account_id == account_id)]


@tool
def create_scheduled_payment(
    state: FinanceDB,
    *,
    from_account_id: Annotated[str, Field(description="Checking or savings account to pay from")],
    payee_id: Annotated[str, Field(description="Saved payee id, e.g. PY-0002")],
    amount: Amount,
    start_date: Annotated[date, Field(description="Date of the first payment, YYYY-MM-DD; must be after today")],
    frequency: Annotated[Literal["once", "weekly", "monthly"], Field(description="once, weekly or monthly")] = "once",
    end_date: Annotated[date | None, Field(description="Last possible payment date for weekly/monthly; omit for no end")] = None,
    memo: Annotated[str, Field(description="Optional payment note")] = "",
) -> ScheduledPayment:
    """Schedule a future payment to a saved payee, once or recurring (weekly / monthly on the start
    date's day of month). Returns the scheduled payment with its id (SP-xxxx) and next_date.
    Errors: not_found (account or payee), invalid_amount (<= 0 or more than 2 decimals), invalid_date
    (start_date today or in the past, or end_date before start_date, or end_date with frequency once),
    invalid_state (credit card accounts cannot fund scheduled payments), limit_exceeded (amount above the
    account's daily outgoing limit).
    """
    amount = _check_amount(amount)
    acc = _account(state, from_account_id)
    _payee(state, payee_id)
    today = _today(state)
    if start_date <= today:
        raise ToolError(f"start_date {start_date} is not in the future (today is {today}); use pay_payee to "
                        "pay today or choose a later date", code="invalid_date")
    if end_date is not None and frequency == "once":
        raise ToolError("end_date only applies to weekly or monthly payments", code="invalid_date")
    if end_date is not None and end_date < start_date:
        raise ToolError(f"end_date {end_date} is before start_date {start_date}", code="invalid_date")
    if acc.type == "credit_card":
        raise ToolError("Scheduled payments must come from a checking or savings account", code="invalid_state")
    if acc.daily_outgoing_limit is not None and amount > acc.daily_outgoing_limit + 1e-9:
        raise ToolError(f"{amount:.2f} EUR is above the daily outgoing limit of {acc.account_id} "
                        f"({acc.daily_outgoing_limit:.2f})", code="limit_exceeded")
    sp_id = f"SP-{state.next_scheduled_seq:04d}"
    state.next_scheduled_seq += 1
    sp = ScheduledPayment(scheduled_payment_id=sp_id, from_account_id=acc.account_id, payee_id=payee_id,
                          amount=amount, frequency=frequency, start_date=start_date, next_date=start_date,
                          end_date=end_date, memo=memo, created_at=state.now)
    state.scheduled_payments[sp_id] = sp
    return sp


def _scheduled(state: FinanceDB, sp_id: str) -> ScheduledPayment:
    sp = state.scheduled_payments.get(sp_id)
    if sp is None:
        raise ToolError(f"No scheduled payment {sp_id}; ids look like SP-0001 (use list_scheduled_payments)",
                        code="not_found")
    return sp


@tool
def skip_next_scheduled_payment(
    state: FinanceDB,
    *,
    scheduled_payment_id: Annotated[str, Field(description="Scheduled payment id, e.g. SP-0001")],
) -> ScheduledPayment:
    """Skip the next occurrence of a recurring (weekly/monthly) scheduled payment; later ones still run.

    Returns the scheduled payment with the skipped date recorded and the new next_date (status becomes
    completed when no occurrence is left before end_date).
    Errors: not_found, invalid_state (cancelled or completed, or a one-time payment: cancel it instead).
    """
    sp = _scheduled(state, scheduled_payment_id)
    if sp.status != "active" or sp.next_date is None:
        raise ToolError(f"{sp.scheduled_payment_id} is {sp.status}; only active payments can be skipped",
                        code="invalid_state")
    if sp.frequency == "once":
        raise ToolError(f"{sp.scheduled_payment_id} is a one-time payment; cancel it with "
                        "cancel_scheduled_payment instead of skipping", code="invalid_state")
    skipped = sp.next_date
    nxt = skipped + timedelta(days=7) if sp.frequency == "weekly" else _add_month(skipped, sp.start_date.day)
    sp.skipped_dates.append(skipped)
    if sp.end_date is not None and nxt > sp.end_date:
        sp.next_date = None
        sp.status = "completed"
    else:
        sp.next_date = nxt
    return sp


@tool(destructive=True)
def cancel_scheduled_payment(
    state: FinanceDB,
    *,
    scheduled_payment_id: Annotated[str, Field(description="Scheduled payment id, e.g. SP-0001")],
) -> ScheduledPayment:
    """Cancel a scheduled payment: no further occurrences will be paid. Returns it with status cancelled.
    Errors: not_found, invalid_state (already cancelled or completed).
    """
    sp = _scheduled(state, scheduled_payment_id)
    if sp.status != "active":
        raise ToolError(f"{sp.scheduled_payment_id} is already {sp.status}", code="invalid_state")
    sp.status = "cancelled"
    sp.next_date = None
    return sp


# ----------------------------------------------------------------------------- budgets & summaries


@tool(read_only=True)
def get_budget_status(
    state: FinanceDB,
    *,
    month: Annotated[str, Field(description="Month as YYYY-MM, e.g. 2026-11")],
) -> BudgetStatus:
    """Compare spending with the monthly budget of every budgeted category for one month.

    Spending = card purchases, direct debits, fees and payee payments in the category (posted and
    pending, all accounts) minus refunds; transfers between own accounts and income are not spending.
    Returns, per category: monthly_limit, spent, remaining (negative when over), percent_used,
    over_budget; plus total_limit and total_spent.
    Errors: invalid_date (month not YYYY-MM).
    """
    first, last = _parse_month(month)
    by, _, _ = _spend_by_category(state, first, last, None)
    lines = []
    for cat in sorted(state.budgets):
        b = state.budgets[cat]
        spent = by.get(cat, 0.0)
        lines.append(BudgetLine(category=cat, monthly_limit=b.monthly_limit, spent=spent,
                                remaining=_money(b.monthly_limit - spent),
                                percent_used=round(100 * spent / b.monthly_limit, 1) if b.monthly_limit else 0.0,
                                over_budget=spent > b.monthly_limit + 1e-9))
    return BudgetStatus(month=first.strftime("%Y-%m"), lines=lines,
                        total_limit=_money(sum(b.monthly_limit for b in state.budgets.values())),
                        total_spent=_money(sum(line.spent for line in lines)))


@tool
def set_category_budget(
    state: FinanceDB,
    *,
    category: Annotated[Category, Field(description="Spending category, e.g. groceries, dining")],
    monthly_limit: Annotated[float, Field(description="New monthly limit in EUR, greater than 0, at most 2 decimals")],
) -> BudgetChange:
    """Create or change the monthly budget of a spending category (applies to every month).

    Returns category, previous_limit (null if the category had no budget) and the new monthly_limit.
    Errors: invalid_amount (<= 0 or more than 2 decimals), invalid_state (income/transfers cannot be
    budgeted, or the budget already has exactly this limit).
    """
    limit = _check_amount(monthly_limit)
    if category in ("income", "transfers"):
        raise ToolError(f"'{category}' is not a spending category and cannot have a budget", code="invalid_state")
    old = state.budgets.get(category)
    if old is not None and abs(old.monthly_limit - limit) < 1e-9:
        raise ToolError(f"The {category} budget is already {limit:.2f} EUR per month", code="invalid_state")
    state.budgets[category] = Budget(category=category, monthly_limit=limit)
    return BudgetChange(category=category, previous_limit=old.monthly_limit if old else None, monthly_limit=limit)


@tool(read_only=True)
def get_spending_summary(
    state: FinanceDB,
    *,
    month: Annotated[str, Field(description="Month as YYYY-MM, e.g. 2026-10")],
    account_id: Annotated[str | None, Field(description="Only this account; omit for the whole household")] = None,
) -> SpendingSummary:
    """Monthly statement summary: spending by category, total spent and total income for one month.

    Spending counts card purchases, direct debits, fees and payee payments (posted and pending) minus
    refunds; income counts deposits (salary etc.) and interest; own-account transfers are excluded.
    Returns month, account_id, total_spent, total_income, net (income - spent), transaction_count and
    by_category (EUR spent per category).
    Errors: invalid_date (month not YYYY-MM), not_found (unknown account_id).
    """
    first, last = _parse_month(month)
    if account_id is not None:
        _account(state, account_id)
    by, income, n = _spend_by_category(state, first, last, account_id)
    spent = _money(sum(by.values()))
    return SpendingSummary(month=first.strftime("%Y-%m"), account_id=account_id, total_spent=spent,
                           total_income=income, net=_money(income - spent), transaction_count=n,
                           by_category=by)


@tool
def recategorize_transaction(
    state: FinanceDB,
    *,
    transaction_id: Annotated[str, Field(description="Transaction id, e.g. TX-000123 (see search_transactions)")],
    category: Annotated[Category, Field(description="New spending category")],
) -> RecategorizeResult:
    """Change the spending category of a transaction (affects budgets and spending summaries).

    Returns transaction_id, previous_category and the new category.
    Errors: not_found, invalid_state (the transaction already has this category, or it is a transfer
    between own accounts, whose category is fixed).
    """
    tx = _transaction(state, transaction_id)
    if tx.kind in ("transfer_in", "transfer_out"):
        raise ToolError(f"{transaction_id} is a transfer between own accounts; its category is fixed",
                        code="invalid_state")
    if tx.category == category:
        raise ToolError(f"{transaction_id} is already categorised as {category}", code="invalid_state")
    prev = tx.category
    tx.category = category
    return RecategorizeResult(transaction_id=transaction_id, previous_category=prev, category=category)


# ----------------------------------------------------------------------------- cards


@tool(read_only=True)
def list_cards(
    state: FinanceDB,
    *,
    customer_id: Annotated[str | None, Field(description="Only cards held by this customer, e.g. CU-002")] = None,
    account_id: Annotated[str | None, Field(description="Only cards on this account")] = None,
) -> list[Card]:
    """List payment cards (debit cards on checking accounts, credit cards on the credit card account).

    Returns card_id, account_id, holder_id, last4, kind, status (active/frozen/lost), expiry and, for a
    lost card, replaced_by (the replacement card id).
    Errors: not_found (unknown customer_id or account_id).
    """
    if customer_id is not None:
        _customer(state, customer_id)
    if account_id is not None:
        _account(state, account_id)
    return [c for c in state.cards.values()
            if (customer_id is None or c.holder_id == customer_id) and (account_id is None or c.account_id == account_id)]


@tool(idempotent=True)
def freeze_card(
    state: FinanceDB,
    *,
    card_id: Annotated[str, Field(description="Card id, e.g. CARD-5001 (see list_cards)")],
) -> Card:
    """Temporarily freeze a card: new card payments are declined until it is unfrozen. Use
    report_card_lost instead if the card is lost or stolen. Returns the card with status frozen.
    Errors: not_found, invalid_state (already frozen, or reported lost).
    """
    card = _card(state, card_id)
    if card.status != "active":
        raise ToolError(f"{card_id} is {card.status}; only an active card can be frozen", code="invalid_state")
    card.status = "frozen"
    return card


@tool(idempotent=True)
def unfreeze_card(
    state: FinanceDB,
    *,
    card_id: Annotated[str, Field(description="Card id, e.g. CARD-5001")],
) -> Card:
    """Unfreeze a frozen card so it can be used again. Returns the card with status active.
    Errors: not_found, invalid_state (the card is not frozen; a lost card can never be reactivated).
    """
    card = _card(state, card_id)
    if card.status != "frozen":
        hint = f"; use its replacement {card.replaced_by}" if card.replaced_by else ""
        raise ToolError(f"{card_id} is {card.status}, not frozen{hint}", code="invalid_state")
    card.status = "active"
    return card


@tool(destructive=True)
def report_card_lost(
    state: FinanceDB,
    *,
    card_id: Annotated[str, Field(description="Card id of the lost or stolen card, e.g. CARD-7002")],
) -> CardReplacement:
    """Report a card lost or stolen: it is blocked permanently and a replacement card (new id and last
    4 digits, same account and holder) is issued. Works on active and frozen cards.
    Returns lost_card and replacement_card.
    Errors: not_found, invalid_state (already reported lost).
    """
    card = _card(state, card_id)
    if card.status == "lost":
        raise ToolError(f"{card_id} was already reported lost; its replacement is {card.replaced_by}",
                        code="invalid_state")
    seq = state.next_card_seq
    new_id = f"CARD-{seq:04d}"
    state.next_card_seq += 1
    y = state.now.year + 4
    new = Card(card_id=new_id, account_id=card.account_id, holder_id=card.holder_id,
               last4=f"{(seq * 7919) % 10000:04d}", kind=card.kind, status="active",
               expires=f"{y}-{state.now.month:02d}", replaces=card_id)
    card.status = "lost"
    card.replaced_by = new_id
    state.cards[new_id] = new
    return CardReplacement(lost_card=card, replacement_card=new)


# ----------------------------------------------------------------------------- disputes


@tool
def dispute_transaction(
    state: FinanceDB,
    *,
    transaction_id: Annotated[str, Field(description="The card transaction to dispute, e.g. TX-000123")],
    reason_code: Annotated[Literal["unauthorized", "duplicate", "not_received", "incorrect_amount", "other"],
                           Field(description="unauthorized (not made by us), duplicate (charged twice), not_received (goods/service never arrived), incorrect_amount, other")],
    details: Annotated[str, Field(description="Free-text explanation for the dispute team")] = "",
) -> Dispute:
    """Open a dispute (chargeback request) on a posted card purchase made within the dispute window
    (60 days before today). Returns the dispute with its id (DP-xxxx) and status open.
    Errors: not_found, invalid_state (not a card purchase, or still pending: wait until it posts),
    dispute_window_closed (older than 60 days), already_disputed (the transaction already has a dispute).
    """
    tx = _transaction(state, transaction_id)
    if tx.kind != "card_purchase":
        raise ToolError(f"{transaction_id} is a {tx.kind}, not a card purchase; only card purchases can be "
                        "disputed", code="invalid_state")
    if tx.status != "posted":
        raise ToolError(f"{transaction_id} is still pending; a dispute can be opened once it has posted",
                        code="invalid_state")
    if tx.dispute_id is not None:
        raise ToolError(f"{transaction_id} is already disputed ({tx.dispute_id})", code="already_disputed")
    age = (_today(state) - tx.date).days
    if age > state.dispute_window_days:
        raise ToolError(f"{transaction_id} is from {tx.date}, {age} days ago; disputes must be opened within "
                        f"{state.dispute_window_days} days", code="dispute_window_closed")
    dp_id = f"DP-{state.next_dispute_seq:04d}"
    state.next_dispute_seq += 1
    dp = Dispute(dispute_id=dp_id, transaction_id=transaction_id, account_id=tx.account_id,
                 amount=_money(-tx.amount), merchant=tx.merchant, reason_code=reason_code, details=details,
                 opened_at=state.now)
    state.disputes[dp_id] = dp
    tx.dispute_id = dp_id
    return dp


@tool(read_only=True)
def get_dispute(
    state: FinanceDB,
    *,
    dispute_id: Annotated[str, Field(description="Dispute id, e.g. DP-0001")],
) -> Dispute:
    """Get one transaction dispute: transaction, amount, merchant, reason, status
    (open / resolved_refunded / resolved_rejected) and when it was opened.
    Errors: not_found.
    """
    dp = state.disputes.get(dispute_id)
    if dp is None:
        raise ToolError(f"No dispute {dispute_id}; dispute ids look like DP-0001", code="not_found")
    return dp
