"""Gazetteers of the heuristic extractor: small on purpose, they only help type guesses and tell
names from common words. Keys are `normalise_text_key` forms.
"""

from __future__ import annotations

import re

from services.common.domain.facts import normalise_text_key


def name_keys(*names: str) -> frozenset[str]:
    return frozenset(normalise_text_key(name) for name in names)


TECHNOLOGIES = name_keys(
    "Python", "R", "C", "C++", "C#", "Go", "Golang", "Rust", "Java", "JavaScript", "TypeScript", "Kotlin",
    "Swift", "Scala", "Haskell", "Elixir", "Erlang", "Julia", "MATLAB", "Ruby", "Rails", "PHP", "Perl", "Lua",
    "Dart", "Flutter", "SQL", "PostgreSQL", "Postgres", "MySQL", "SQLite", "Redis", "MongoDB", "Kafka", "NATS",
    "RabbitMQ", "Qdrant", "Neo4j", "FalkorDB", "Elasticsearch", "Docker", "Kubernetes", "Helm", "Terraform",
    "Ansible", "React", "Vue", "Angular", "Svelte", "Next.js", "Node.js", "Deno", "Django", "Flask", "FastAPI",
    "Spring", "PyTorch", "TensorFlow", "JAX", "Keras", "NumPy", "pandas", "Polars", "scikit-learn", "Jupyter",
    "Spark", "Hadoop", "Airflow", "dbt", "Linux", "Ubuntu", "macOS", "Windows", "Android", "iOS", "AWS", "GCP",
    "Azure", "Git", "GitHub", "GitLab", "VS Code", "VSCode", "Vim", "Neovim", "Emacs", "IntelliJ", "PyCharm",
    "Excel", "Slack", "Notion", "Figma", "Jira", "Confluence", "ChatGPT", "GPT", "GPT-4", "Claude", "Gemini",
    "LLaMA", "LangChain", "Tableau", "Power BI", "Obsidian", "Zoom", "Photoshop", "Unity", "Unreal",
    "Memcached", "Jenkins", "GitHub Actions", "GitLab CI", "CircleCI", "Travis CI", "Bitbucket", "Grafana",
    "Prometheus", "Kibana", "Nginx", "Apache", "Cassandra", "DynamoDB", "BigQuery", "Snowflake", "Databricks",
    "ClickHouse", "Supabase", "Firebase", "Vercel", "Heroku", "Netlify", "Cloudflare", "OpenShift", "Podman",
    "Vagrant", "Pulumi", "Argo CD", "Istio", "Envoy", "gRPC", "GraphQL", "Express", "NestJS", "Laravel",
    "Symfony", "Svelte", "SvelteKit", "Nuxt", "Remix", "Tailwind", "Bootstrap", "jQuery", "Webpack", "Vite",
    "Bun", "Zig", "OCaml", "Clojure", "F#", "Fortran", "COBOL", "Bash", "PowerShell", "Sublime Text", "Xcode",
    "Android Studio", "Eclipse", "WebStorm", "Cursor", "Copilot", "Postman", "Trello", "Asana", "Linear",
    "Teams", "Discord", "Telegram", "WhatsApp", "KakaoTalk", "Airtable", "Sentry", "Datadog", "Splunk",
    "Hugging Face", "scikit", "OpenCV", "Spark", "Flink", "Beam", "Debian", "Fedora", "Arch Linux", "CentOS",
    "Raspberry Pi", "Arduino", "Blender", "Premiere", "Lightroom", "Illustrator", "Sketch", "Miro",
    "파이썬", "자바", "자바스크립트", "타입스크립트", "러스트", "코틀린", "스위프트", "고랭", "도커", "쿠버네티스",
    "리액트", "장고", "플라스크", "파이토치", "텐서플로", "엑셀", "노션", "슬랙", "피그마", "지라", "깃허브", "깃",
    "리눅스", "우분투", "윈도우", "안드로이드", "챗GPT", "챗지피티", "엘라스틱서치", "레디스", "카프카", "스프링",
    "플러터", "스칼라", "레일즈", "포스트그레스", "포스트그레스큐엘", "마이에스큐엘", "몽고디비",
    "젠킨스", "깃랩", "테라폼", "앤서블", "앵귤러", "이맥스", "네오빔",
    "인텔리제이", "파이참", "주피터", "판다스", "넘파이", "에어플로우", "그라파나", "프로메테우스", "엔진엑스",
    "도커허브", "헬름", "랭체인", "트렐로", "지라", "컨플루언스", "디스코드", "카카오톡", "텔레그램", "엑스코드",
    "타입스크립트", "자바스크립트", "코틀린", "씨샵", "스벨트", "파이어베이스", "수파베이스", "버셀",
)  # fmt: skip

# Lowercase spellings that are unambiguous enough to count as technology names in running text.
TECH_LOWERCASE_OK = name_keys(
    "python", "javascript", "typescript", "kotlin", "golang", "haskell", "postgresql", "postgres", "mysql",
    "sqlite", "redis", "mongodb", "kafka", "qdrant", "neo4j", "falkordb", "docker", "kubernetes", "terraform",
    "django", "flask", "fastapi", "pytorch", "tensorflow", "numpy", "pandas", "polars", "scikit-learn",
    "jupyter", "airflow", "linux", "ubuntu", "github", "gitlab", "vscode", "vim", "neovim", "emacs", "excel",
    "notion", "figma", "jira", "chatgpt", "langchain", "tableau", "obsidian", "matlab", "macos", "ios",
)  # fmt: skip

PLACES = name_keys(
    "Seoul", "Busan", "Incheon", "Daegu", "Daejeon", "Gwangju", "Ulsan", "Sejong", "Jeju", "Suwon", "Seongnam",
    "Pangyo", "Gangnam", "Bundang", "Ilsan", "Korea", "South Korea", "Japan", "Tokyo", "Osaka", "Kyoto", "China",
    "Beijing", "Shanghai", "Hong Kong", "Taiwan", "Taipei", "Singapore", "Vietnam", "Hanoi", "Thailand",
    "Bangkok", "India", "USA", "US", "United States", "America", "Canada", "Toronto", "Vancouver", "Mexico",
    "Brazil", "New York", "San Francisco", "Los Angeles", "Seattle", "Boston", "Chicago", "Austin", "London",
    "Paris", "Berlin", "Munich", "Amsterdam", "Stockholm", "Sweden", "Germany", "France", "Spain", "Madrid",
    "Barcelona", "Italy", "Rome", "UK", "England", "Ireland", "Dublin", "Australia", "Sydney", "Melbourne",
    "서울", "부산", "인천", "대구", "대전", "광주", "울산", "세종", "제주", "제주도", "수원", "성남", "판교",
    "강남", "분당", "일산", "한국", "대한민국", "일본", "도쿄", "오사카", "중국", "베이징", "상하이", "대만",
    "싱가포르", "베트남", "미국", "뉴욕", "캐나다", "영국", "런던", "파리", "프랑스", "독일", "베를린", "호주",
    # Capitals and large cities of the world, and the countries people most often mention moving to.
    "Lisbon", "Portugal", "Porto", "Manila", "Philippines", "Jakarta", "Indonesia", "Bali", "Kuala Lumpur",
    "Malaysia", "Ho Chi Minh City", "Saigon", "Da Nang", "Phnom Penh", "Cambodia", "Mumbai", "Delhi",
    "New Delhi", "Bangalore", "Bengaluru", "Dubai", "Abu Dhabi", "Istanbul", "Turkey", "Cairo", "Egypt",
    "Nairobi", "Kenya", "Lagos", "Nigeria", "Cape Town", "Johannesburg", "South Africa", "Iceland",
    "Reykjavik", "Norway", "Oslo", "Denmark", "Copenhagen", "Finland", "Helsinki", "Netherlands", "Belgium",
    "Brussels", "Switzerland", "Zurich", "Geneva", "Austria", "Vienna", "Prague", "Czech Republic", "Poland",
    "Warsaw", "Budapest", "Hungary", "Greece", "Athens", "Milan", "Florence", "Venice", "Naples", "Lyon",
    "Marseille", "Nice", "Edinburgh", "Manchester", "Scotland", "Wales", "Hamburg", "Frankfurt", "Cologne",
    "Mexico City", "Argentina", "Buenos Aires", "Chile", "Santiago", "Peru", "Lima", "Colombia", "Bogota",
    "Sao Paulo", "Rio de Janeiro", "Portland", "Denver", "Atlanta", "Miami", "Dallas", "Houston", "Phoenix",
    "Philadelphia", "Washington", "San Diego", "San Jose", "Las Vegas", "Honolulu", "Hawaii", "California",
    "Texas", "Florida", "Montreal", "Ottawa", "Calgary", "Auckland", "New Zealand", "Wellington", "Perth",
    "Brisbane", "Osaka", "Fukuoka", "Sapporo", "Nagoya", "Okinawa", "Yokohama", "Kobe", "Shenzhen",
    "Guangzhou", "Chengdu", "Hangzhou", "Macau", "Ulaanbaatar", "Mongolia", "Pohang", "Gyeongju", "Jeonju",
    "Changwon", "Cheongju", "Chuncheon", "Gangneung", "Yeosu", "Mokpo", "Gimhae", "Goyang", "Yongin",
    "Hwaseong", "Anyang", "Bucheon", "Paju", "Songdo", "Itaewon", "Hongdae", "Jamsil", "Yeouido",
    "리스본", "포르투갈", "마닐라", "필리핀", "자카르타", "인도네시아", "발리", "쿠알라룸푸르", "말레이시아",
    "호치민", "다낭", "하노이", "방콕", "태국", "인도", "뭄바이", "두바이", "이스탄불", "튀르키예", "터키",
    "이집트", "아이슬란드", "노르웨이", "덴마크", "핀란드", "스웨덴", "네덜란드", "암스테르담", "벨기에",
    "스위스", "취리히", "오스트리아", "프라하", "체코", "폴란드", "헝가리", "그리스", "이탈리아", "로마",
    "밀라노", "스페인", "마드리드", "바르셀로나", "뮌헨", "프랑크푸르트", "함부르크", "에든버러", "아일랜드",
    "더블린", "멕시코", "브라질", "아르헨티나", "칠레", "페루", "콜롬비아", "로스앤젤레스", "엘에이", "LA",
    "샌프란시스코", "시애틀", "보스턴", "시카고", "포틀랜드", "오스틴", "댈러스", "휴스턴", "마이애미",
    "워싱턴", "하와이", "캘리포니아", "텍사스", "토론토", "밴쿠버", "몬트리올", "시드니", "멜버른",
    "브리즈번", "퍼스", "오클랜드", "뉴질랜드", "교토", "후쿠오카", "삿포로", "나고야", "오키나와",
    "요코하마", "홍콩", "타이베이", "광저우", "청두", "마카오", "몽골", "포항", "경주", "전주", "창원",
    "청주", "춘천", "강릉", "여수", "목포", "김해", "용인", "안양", "부천", "파주", "송도",
    "이태원", "홍대", "잠실", "여의도", "제주도", "속초", "안동", "천안", "평택", "의정부",
)  # fmt: skip

ORGANISATIONS = name_keys(
    "Google", "Microsoft", "Apple", "Amazon", "Meta", "Facebook", "Netflix", "Samsung", "Samsung Electronics",
    "LG", "SK", "Hyundai", "Kia", "Naver", "Kakao", "Coupang", "Line", "Toss", "Baemin", "OpenAI",
    "Anthropic", "IBM", "Intel", "NVIDIA", "AMD", "Oracle", "Salesforce", "Tesla", "Uber", "Airbnb", "Spotify",
    "삼성", "삼성전자", "엘지", "현대", "현대자동차", "기아", "네이버", "카카오", "쿠팡", "라인", "토스", "배민",
    "당근", "구글", "마이크로소프트", "애플", "아마존", "메타", "오픈AI", "엔비디아",
    "Shopify", "Stripe", "Atlassian", "Adobe", "Twitter", "X Corp", "LinkedIn", "GitHub Inc", "Dropbox",
    "Grab", "Sea", "Alibaba", "Tencent", "Baidu", "ByteDance", "Sony", "Nintendo", "Toyota", "Honda",
    "Rakuten", "SoftBank", "Nexon", "NCSoft", "Netmarble", "Krafton", "Smilegate", "Woowa Brothers",
    "Daangn", "Yanolja", "Musinsa", "Kurly", "Hanwha", "Lotte", "CJ", "Posco", "KT", "SK Telecom", "LG CNS",
    "Samsung SDS", "Deloitte", "McKinsey", "Accenture", "Goldman Sachs", "JP Morgan",
    "KAIST", "POSTECH", "UNIST", "GIST", "SNU", "Yonsei", "Korea University", "Sogang", "Hanyang",
    "Sungkyunkwan", "Ewha", "MIT", "Stanford", "Harvard", "Oxford", "Cambridge", "Caltech", "Berkeley",
    "UCLA", "NYU", "Columbia",
    "쇼피파이", "스트라이프", "어도비", "넥슨", "엔씨소프트", "넷마블", "크래프톤", "스마일게이트",
    "우아한형제들", "당근마켓", "야놀자", "무신사", "컬리", "한화", "롯데", "포스코", "SK텔레콤", "LG전자",
    "소니", "닌텐도", "토요타", "알리바바", "텐센트", "바이두", "바이트댄스",
    "카이스트", "포스텍", "유니스트", "서울대", "서울대학교", "연세대", "연세대학교", "고려대", "고려대학교",
    "서강대", "한양대", "성균관대", "이화여대", "서울대병원", "세브란스", "삼성서울병원", "아산병원",
)  # fmt: skip

ORGANISATION_SUFFIXES = re.compile(
    r"(?:\b(?:Inc|Corp|Corporation|Ltd|LLC|GmbH|Co|Company|University|College|Institute|Bank|Labs?|Group|"
    r"Foundation|Agency|Ministry|Hospital|School|Association|Electronics|Motors|Airlines|Clinic|Academy|"
    r"Studios?)\.?$)|(?:주식회사|대학교|대학|은행|전자|그룹|재단|연구소|병원|의원|학원|협회|공사|항공|증권|카드)$"
)
PROJECT_WORDS = re.compile(r"^(?:project|프로젝트)$", re.IGNORECASE)
PERSON_TITLES = frozenset({"mr", "mrs", "ms", "miss", "dr", "prof", "professor", "sir", "madam", "uncle", "aunt"})

# Gazetteer names that are also common words: they only count where a capital letter proves a name.
AMBIGUOUS_NAMES = name_keys(
    "Go", "Swift", "Rust", "Spring", "Unity", "Line", "Zoom", "Meta", "Toss", "Apple", "Amazon", "Sea", "Linear",
    "Teams", "Beam", "Express", "Bun", "Cursor", "Sketch", "Grab", "Remix", "Nice", "Bootstrap", "Eclipse",
    "Premiere", "Illustrator", "Vite", "Phoenix", "Columbia", "Cambridge", "Washington", "Spark", "Apache",
)  # fmt: skip

# Administrative units and stations: "강남구", "수원시", "역삼동", "강남역".
KO_PLACE_NAME = re.compile(r"[\uac00-\ud7a3]{1,6}(?:특별시|광역시|시|구|군|동|읍|면|역)")

# Relatives and roles: "my friend uses R" is about the friend, never the user.
EN_RELATION_NOUNS = (
    "friend", "wife", "husband", "partner", "boyfriend", "girlfriend", "fiancé", "fiance", "fiancée", "fiancee",
    "mother", "mom", "mum", "father", "dad", "brother", "sister", "son", "daughter", "kid", "child", "children",
    "kids", "parents", "colleague", "coworker", "co-worker", "boss", "manager", "roommate", "cousin", "uncle",
    "aunt", "grandmother", "grandma", "grandfather", "grandpa", "neighbor", "neighbour", "teammate", "mentor",
    "team lead", "tech lead", "supervisor", "brother-in-law", "sister-in-law", "mother-in-law", "father-in-law",
    "bf", "gf", "bff", "bestie", "hubby",  # as chat spells them
)  # fmt: skip
KO_RELATION_NOUNS = frozenset(
    {
        "친구", "아내", "남편", "와이프", "부인", "여자친구", "남자친구", "애인", "엄마", "아빠", "어머니", "아버지",
        "부모님", "형", "누나", "언니", "오빠", "동생", "남동생", "여동생", "아들", "딸", "아이", "애들", "동료",
        "상사", "팀장", "팀원", "부장", "과장", "대리", "사장", "선배", "후배", "룸메이트", "사촌", "삼촌", "이모",
        "고모", "할머니", "할아버지", "이웃", "멘토", "교수", "선생님", "파트너", "약혼자", "약혼녀", "남친", "여친",
        "리드", "사수",
        "형부", "제부", "매형", "처제", "시누이", "며느리", "사위", "조카", "손자", "손녀",
    }
)  # fmt: skip


# Hangul spellings of known names: Kiwi splits or glues loanwords it does not know, and these say where
# such a name begins and ends.
KNOWN_KOREAN_NAMES = frozenset(
    name for name in (*TECHNOLOGIES, *PLACES, *ORGANISATIONS) if re.fullmatch(r"[\uac00-\ud7a3]{2,}", name)
)

# ---- Words that are never entities -------------------------------------------------------------------
# Time expressions say when something happened, not what it is about: a time zone, a weekday, a month,
# a quarter or a relative day ("KST", "Q3", "tomorrow", "지난달") must never become a graph node.
TIME_WORDS = name_keys(
    "UTC", "GMT", "KST", "JST", "CST", "EST", "EDT", "PST", "PDT", "MST", "MDT", "CET", "CEST", "BST", "IST",
    "AEST", "SGT", "HKT", "Q1", "Q2", "Q3", "Q4", "H1", "H2", "FY", "YTD", "EOD", "EOW", "EOM", "ETA",
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February",
    "March", "April", "May", "June", "July", "August", "September", "October", "November", "December",
    "Today", "Tomorrow", "Yesterday", "Tonight", "Weekend", "Spring", "Summer", "Autumn", "Fall", "Winter",
    "Christmas", "New Year", "Chuseok", "Seollal",
    "오늘", "내일", "어제", "모레", "그제", "그저께", "지난달", "이번달", "다음달", "지난주", "이번주", "다음주",
    "작년", "올해", "내년", "재작년", "요즘", "요새", "최근", "지금", "현재", "나중", "예전", "옛날", "아까",
    "오전", "오후", "새벽", "아침", "점심", "저녁", "밤", "낮", "주말", "평일", "주중", "연말", "연초", "월말",
    "월초", "분기", "상반기", "하반기", "봄", "여름", "가을", "겨울", "방학", "휴가", "설날", "추석", "연휴",
    "월요일", "화요일", "수요일", "목요일", "금요일", "토요일", "일요일", "매일", "매주", "매달", "매년",
    "언젠가", "이번", "저번", "다음", "처음", "마지막",
)  # fmt: skip
# A Korean time expression built from a number: "3월", "3시", "2분기", "10일", "2024년", "3주".
KO_TIME_EXPRESSION = re.compile(r"^\d+\s*(?:월|일|시|분|초|년|주|분기|학기|시간|개월)(?:\s*\d+\s*(?:일|분|시))?$")
# "3pm", "9am", "10:30", "2024", "2024-05-01": clock times and dates.
EN_TIME_EXPRESSION = re.compile(
    r"^(?:\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)|\d{1,2}:\d{2}|\d{4}(?:-\d{2}){0,2})$", re.IGNORECASE
)

# Role and concept acronyms and bare generic nouns name a kind of thing, not a particular one ("the API",
# "our CTO", "UX designer"); a conversation mentions them everywhere and a node for each would link
# every session that says "API".
GENERIC_NAMES = name_keys(
    "API", "APIs", "SDK", "CLI", "GUI", "UI", "UX", "DB", "SQL database", "CI", "CD", "CI/CD", "PR", "PRs", "MR",
    "URL", "ID", "OS", "PDF", "FAQ", "KPI", "OKR", "OKRs", "MVP", "PoC", "SLA", "SLO", "QA", "HR", "PM", "VP",
    "CEO", "CTO", "CFO", "COO", "CPO", "CIO", "CMO", "PhD", "MBA", "BA", "BS", "MS", "MSc", "AI", "ML", "LLM",
    "LLMs", "NLP", "GPU", "CPU", "RAM", "SSD", "HTTP", "HTTPS", "JSON", "YAML", "CSV", "HTML", "CSS", "REST",
    "DNS", "VPN", "SSH", "IDE", "B2B", "B2C", "SaaS", "DM", "DMs", "TV", "ASAP", "FYI", "TBD", "TODO", "N/A",
    "Project", "Team", "Meeting", "Company", "Office", "Startup", "App", "Server", "Dashboard", "Doc", "Docs",
    "프로젝트", "팀", "회사", "회의", "미팅", "문서", "서버", "배포", "리뷰", "대시보드", "토큰", "스타트업",
    "사무실", "에디터", "프론트엔드", "백엔드", "마이그레이션", "설계", "지사", "투자", "앱", "노트북",
    "비밀번호", "캐싱", "코드", "버그", "기능", "일정", "보고서", "발표", "데이터", "모델", "서비스", "고객",
    "팀장", "팀원", "동료", "사장", "대표", "부장", "과장", "대리", "인턴", "개발자", "디자이너", "엔진", "시스템",
    "플랫폼", "데이터팀", "디자인팀", "개발팀", "물류팀", "인사팀", "영업팀", "마케팅팀", "지연", "시간",
)  # fmt: skip


def is_never_entity(name: str) -> bool:
    """A time expression or a bare generic noun: never a node, whatever a pattern guessed."""
    key = normalise_text_key(name)
    if key in TIME_WORDS or key in GENERIC_NAMES:
        return True
    return bool(KO_TIME_EXPRESSION.match(key) or EN_TIME_EXPRESSION.match(key))


# A trailing version number does not change what a technology is: "PostgreSQL 16", "Python 3.12", "iOS 17".
VERSION_SUFFIX = re.compile(r"\s*v?\d+(?:\.\d+)*$")
# Words that open an organisation's name ("Studio Ghibli", "University of Seoul", "Bank of Korea").
ORGANISATION_PREFIXES = re.compile(r"^(?:Studio|Studios|University|Bank|Institute|Museum|Hospital|College)\b")


# ---- Lexicons for facts whose value is a kind, not a name ---------------------------------------------
# Head nouns of job titles: "I'm a backend engineer" is a job only when the phrase ends in one of these
# ("I'm a huge fan of …", "I'm a bit tired" are not).
EN_OCCUPATIONS = (
    "engineer", "developer", "programmer", "designer", "scientist", "analyst", "manager", "lead", "director",
    "teacher", "professor", "lecturer", "student", "researcher", "nurse", "doctor", "physician", "surgeon",
    "dentist", "pharmacist", "lawyer", "attorney", "accountant", "consultant", "architect", "writer",
    "journalist", "editor", "artist", "musician", "chef", "cook", "baker", "barista", "waiter", "waitress",
    "driver", "pilot", "firefighter", "officer", "farmer", "mechanic", "electrician", "plumber", "carpenter",
    "cashier", "clerk", "secretary", "intern", "founder", "co-founder", "cofounder", "freelancer",
    "photographer", "therapist", "psychologist", "counselor", "counsellor", "veterinarian", "vet",
    "translator", "interpreter", "librarian", "administrator", "technician", "specialist", "coordinator",
    "recruiter", "salesperson", "marketer", "economist", "statistician", "mathematician", "physicist",
    "chemist", "biologist", "paramedic", "caregiver", "tutor", "coach", "trainer", "instructor", "postdoc",
    "CEO", "CTO", "CFO", "COO", "PM", "SRE", "DevOps engineer", "maintainer", "author", "creator", "contributor",
)  # fmt: skip
KO_OCCUPATION_HEADS = (
    "개발자", "엔지니어", "디자이너", "사이언티스트", "애널리스트", "분석가", "매니저", "리드", "팀장", "교사",
    "선생님", "교수", "강사", "학생", "대학원생", "연구원", "간호사", "의사", "약사", "치과의사", "수의사",
    "변호사", "회계사", "세무사", "컨설턴트", "건축가", "작가", "기자", "편집자", "예술가", "음악가", "요리사",
    "셰프", "제빵사", "바리스타", "운전기사", "기사", "조종사", "소방관", "경찰관", "경찰", "공무원", "군인",
    "농부", "정비사", "인턴", "창업자", "대표", "프리랜서", "사진작가", "상담사", "번역가", "통역사", "사서",
    "기획자", "마케터", "영업사원", "트레이너", "코치", "과학자", "물리학자", "화학자", "박사과정", "석사과정",
    "PM", "PO", "CTO", "CEO",
)  # fmt: skip
EN_PETS = (
    "dogs?", "cats?", "pupp(?:y|ies)", "kittens?", "hamsters?", "rabbits?", "bunn(?:y|ies)", "parrots?", "birds?",
    "fish", "goldfish", "turtles?", "tortoises?", "snakes?", "lizards?", "guinea pigs?", "ferrets?", "horses?",
)  # fmt: skip
KO_PETS = frozenset(
    {
        "강아지",
        "개",
        "고양이",
        "햄스터",
        "토끼",
        "앵무새",
        "새",
        "물고기",
        "금붕어",
        "거북이",
        "뱀",
        "도마뱀",
        "고슴도치",
        "말",
    }
)
# Names of schools: "goes to Seoul National University" is a school, "goes to Busan" is a trip.
SCHOOL_NAME = re.compile(
    r"(?:\b(?:University|College|School|Academy|Institute)\b|^University\b|(?:대학교|대학|대|고등학교|고교|중학교|초등학교"
    r"|학교|유치원|대학원)$)"
)
SCHOOLS = name_keys(
    "KAIST", "POSTECH", "UNIST", "GIST", "DGIST", "SNU", "Yonsei", "Korea University", "Sogang", "Hanyang",
    "Sungkyunkwan", "Ewha", "MIT", "Stanford", "Harvard", "Oxford", "Cambridge", "Caltech", "Berkeley", "UCLA",
    "NYU", "Columbia", "카이스트", "포스텍", "유니스트", "서울대", "연세대", "고려대", "서강대", "한양대", "성균관대",
    "이화여대",
)  # fmt: skip
KO_LANGUAGES = frozenset(
    {
        "한국어", "영어", "일본어", "중국어", "스페인어", "프랑스어", "독일어", "러시아어", "이탈리아어", "포르투갈어",
        "베트남어", "태국어", "아랍어", "힌디어", "인도네시아어", "네덜란드어", "광동어", "광둥어", "한국말", "일본말",
        "중국말", "만다린", "몽골어", "터키어", "튀르키예어", "히브리어", "라틴어", "말레이어", "타갈로그어",
        "스웨덴어", "우크라이나어", "폴란드어", "그리스어", "수어",
    }
)  # fmt: skip


def is_school_name(value: str) -> bool:
    """A school's name: "Seoul National University", "연세대", "KAIST"."""
    return bool(SCHOOL_NAME.search(value)) or normalise_text_key(value) in SCHOOLS


# Technologies that are programming languages: "Go로 개발해요" uses the language Go.
PROGRAMMING_LANGUAGES = name_keys(
    "Python", "R", "C", "C++", "C#", "Go", "Golang", "Rust", "Java", "JavaScript", "TypeScript", "Kotlin", "Swift",
    "Scala", "Haskell", "Elixir", "Erlang", "Julia", "MATLAB", "Ruby", "PHP", "Perl", "Lua", "Dart", "SQL", "Zig",
    "OCaml", "Clojure", "F#", "Fortran", "COBOL", "Bash", "파이썬", "자바", "자바스크립트", "타입스크립트", "러스트",
    "코틀린", "스위프트", "고랭", "스칼라",
)  # fmt: skip


# Nationality and language adjectives: "Korean food", "a Japanese class" describe, they do not name a node.
DEMONYMS = name_keys(
    "Korean", "Japanese", "Chinese", "English", "American", "British", "French", "German", "Spanish", "Italian",
    "Portuguese", "Russian", "Vietnamese", "Thai", "Indian", "Mexican", "Canadian", "Australian", "Dutch",
    "Swedish", "Norwegian", "Danish", "Finnish", "Polish", "Greek", "Turkish", "Arabic", "Hindi", "Indonesian",
    "Filipino", "Brazilian", "European", "Asian", "African", "Western", "Eastern", "Cantonese", "Mandarin",
)  # fmt: skip
