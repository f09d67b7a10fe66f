"""The PersonalFinance database: one household's accounts, cards, transactions, payees, scheduled
payments, budgets and disputes.  All money is EUR, stored as floats rounded to 2 decimals.

Sign convention: a transaction's ``amount`` is signed from the account's point of view (negative =
money out, positive = money in) and every posted transaction moves ``Account.balance`` by its amount.
A credit card account therefore has a negative balance when money is owed; its available credit is
``credit_limit + balance + pending amounts``.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

Category = Literal[
    "groceries", "dining", "transport", "utilities", "housing", "entertainment", "shopping",
    "health", "travel", "subscriptions", "insurance", "childcare", "income", "transfers", "fees",
    "other",
]
AccountType = Literal["checking", "savings", "credit_card"]
TxKind = Literal[
    "card_purchase", "refund", "deposit", "interest", "direct_debit", "fee",
    "transfer_in", "transfer_out", "payment",
]


class Customer(BaseModel):
    customer_id: str
    name: str
    email: str
    phone: str


class Account(BaseModel):
    account_id: str
    name: str
    type: AccountType
    owner_ids: list[str]
    currency: Literal["EUR"] = "EUR"
    iban: str | None = None
    balance: float
    credit_limit: float | None = None
    daily_outgoing_limit: float | None = None
    status: Literal["open", "closed"] = "open"


class Card(BaseModel):
    card_id: str
    account_id: str
    holder_id: str
    last4: str
    kind: Literal["debit", "credit"]
    status: Literal["active", "frozen", "lost"] = "active"
    expires: str
    replaces: str | None = None
    replaced_by: str | None = None


class Transaction(BaseModel):
    transaction_id: str
    account_id: str
    date: date
    amount: float
    merchant: str
    category: Category
    kind: TxKind
    status: Literal["posted", "pending"] = "posted"
    card_id: str | None = None
    memo: str = ""
    transfer_id: str | None = None
    payment_id: str | None = None
    dispute_id: str | None = None


class Payee(BaseModel):
    payee_id: str
    name: str
    iban: str
    reference: str = ""
    default_category: Category = "other"


class Transfer(BaseModel):
    transfer_id: str
    from_account_id: str
    to_account_id: str
    amount: float
    date: date
    memo: str = ""
    debit_transaction_id: str
    credit_transaction_id: str


class Payment(BaseModel):
    payment_id: str
    from_account_id: str
    payee_id: str
    amount: float
    date: date
    memo: str = ""
    transaction_id: str
    card_id: str | None = None
    scheduled_payment_id: str | None = None


class ScheduledPayment(BaseModel):
    scheduled_payment_id: str
    from_account_id: str
    payee_id: str
    amount: float
    frequency: Literal["once", "weekly", "monthly"]
    start_date: date
    next_date: date | None
    end_date: date | None = None
    memo: str = ""
    status: Literal["active", "cancelled", "completed"] = "active"
    skipped_dates: list[date] = Field(default_factory=list)
    created_at: datetime


class Budget(BaseModel):
    category: Category
    monthly_limit: float


class Dispute(BaseModel):
    dispute_id: str
    transaction_id: str
    account_id: str
    amount: float
    merchant: str
    reason_code: Literal["unauthorized", "duplicate", "not_received", "incorrect_amount", "other"]
    details: str = ""
    status: Literal["open", "resolved_refunded", "resolved_rejected"] = "open"
    opened_at: datetime


class FinanceDB(BaseModel):
    """Root model: the household's bank data plus the fixed clock and id counters."""

    now: datetime
    household_name: str
    customers: dict[str, Customer] = Field(default_factory=dict)
    accounts: dict[str, Account] = Field(default_factory=dict)
    cards: dict[str, Card] = Field(default_factory=dict)
    transactions: dict[str, Transaction] = Field(default_factory=dict)
    payees: dict[str, Payee] = Field(default_factory=dict)
    transfers: dict[str, Transfer] = Field(default_factory=dict)
    payments: dict[str, Payment] = Field(default_factory=dict)
    scheduled_payments: dict[str, ScheduledPayment] = Field(default_factory=dict)
    budgets: dict[str, Budget] = Field(default_factory=dict)
    disputes: dict[str, Dispute] = Field(default_factory=dict)
    dispute_window_days: int = 60
    next_tx_seq: int = 1
    next_transfer_seq: int = 1
    next_payment_seq: int = 1
    next_scheduled_seq: int = 1
    next_dispute_seq: int = 1
    next_payee_seq: int = 1
    next_card_seq: int = 8001
